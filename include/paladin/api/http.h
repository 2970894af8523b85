// What Paladin's HTTP clients share (the REST client, the Kubernetes API client): a call's
// protection from SIGPIPE and the Status an HTTP error status becomes.
#ifndef PALADIN_API_HTTP_H_
#define PALADIN_API_HTTP_H_

#include <signal.h>

#include <string>

#include "paladin/base/status.h"

namespace paladin::api {

// The packaged HTTP library writes with plain send(), so a server that answers and closes before
// a request's body is all sent (413 on an oversized body) would kill the caller with SIGPIPE.
// While it lives, this blocks SIGPIPE on the calling thread; a SIGPIPE raised meanwhile is taken
// off the thread's pending set, so the write fails with EPIPE and the call returns an error.
class SigpipeBlock {
 public:
  SigpipeBlock();
  ~SigpipeBlock();
  SigpipeBlock(const SigpipeBlock&) = delete;
  SigpipeBlock& operator=(const SigpipeBlock&) = delete;

 private:
  sigset_t pipe_{};
  sigset_t old_{};
  bool was_pending_ = false;
};

// An HTTP error status with the server's message: 401, 403, 404 and 409 by name, any other 4xx
// as an invalid argument, the rest as unavailable. The message reads "WHAT: MESSAGE".
Status StatusForHttp(int status, const std::string& what, const std::string& message);

}  // namespace paladin::api

#endif  // PALADIN_API_HTTP_H_
