#include "paladin/api/http.h"

#include <ctime>

namespace paladin::api {

SigpipeBlock::SigpipeBlock() {
  sigemptyset(&pipe_);
  sigaddset(&pipe_, SIGPIPE);
  sigset_t pending;
  sigpending(&pending);
  was_pending_ = sigismember(&pending, SIGPIPE) == 1;
  pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
}

SigpipeBlock::~SigpipeBlock() {
  sigset_t pending;
  sigpending(&pending);
  if (!was_pending_ && sigismember(&pending, SIGPIPE) == 1) {
    const timespec now{0, 0};
    (void)sigtimedwait(&pipe_, nullptr, &now);
  }
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

Status StatusForHttp(int status, const std::string& what, const std::string& message) {
  const std::string text = what + ": " + message;
  if (status == 401) return Unauthenticated(text);
  if (status == 403) return PermissionDenied(text);
  if (status == 404) return NotFound(text);
  if (status == 409) return FailedPrecondition(text);
  if (status >= 400 && status < 500) return InvalidArgument(text);
  return Unavailable(text);
}

}  // namespace paladin::api
