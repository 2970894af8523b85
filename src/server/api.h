// The HTTP boundary: routes of docs/formats/api.md onto the control plane, with authentication,
// scope checks, body limits and JSON errors. No exception leaves a handler: anything thrown while
// reading a request becomes a 400 naming what was wrong.
#pragma once

#include <httplib.h>

#include "control.h"

namespace paladin::server {

inline constexpr size_t kMaxBodyBytes = 1 << 20;

// Installs every route on `http`. `control` must outlive the server.
void InstallRoutes(httplib::Server& http, Control& control);

}  // namespace paladin::server
