// The HTTP boundary: routes of docs/formats/api.md onto the control plane, with authentication,
// scope checks and JSON errors. The route and the caller's token are checked from a request's
// head, before its body is read (http_front.h). No exception leaves a handler: anything thrown
// while reading a request becomes a 400 naming what was wrong.
#pragma once

#include "control.h"
#include "http_front.h"
#include "pods.h"

namespace paladin::server {

inline constexpr size_t kMaxBodyBytes = 1 << 20;

// Every route, as the front's admission function. `control` and `pods` must outlive the front.
HttpAdmit MakeRoutes(Control& control, PodBook& pods);

}  // namespace paladin::server
