// HTTP/1.1 on the wire, for the server's front (http_front.h): a request's head parsed from
// bytes, its body framing (Content-Length or chunked) decoded incrementally under a byte limit,
// and an answer written out. Pure functions over strings: no sockets, no clocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace paladin::server {

struct HttpRequest {
  std::string method;                              // as sent: "GET"
  std::string target;                              // as sent: "/v1/jobs?all=1"
  std::string path;                                // the target before '?', percent-decoded
  int minor_version = 1;                           // HTTP/1.<minor>
  std::multimap<std::string, std::string> params;  // the query, percent- and '+'-decoded
  std::vector<std::pair<std::string, std::string>> headers;  // in order, names as sent
  std::string body;
  // Filled by the router: [0] the path, then one entry per captured segment.
  std::vector<std::string> matches;
  std::string remote_addr;

  bool HasParam(const std::string& key) const { return params.count(key) > 0; }
  // The first value of `key`, or "".
  std::string Param(const std::string& key) const;
  // Every value of header `name`, compared without regard to case.
  std::vector<std::string> HeaderValues(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type;  // empty: no body
  std::string body;
};

// A response with a JSON body {"error": message}.
HttpResponse HttpError(int status, std::string_view message);

// How a request's body is framed.
struct BodyFraming {
  bool chunked = false;
  uint64_t content_length = 0;  // when not chunked; 0 = no body
  bool has_body() const { return chunked || content_length > 0; }
};

// The outcome of reading a head: a request, or an HTTP status with a message.
struct HeadResult {
  int error_status = 0;  // 0: `request` and `framing` are valid
  std::string error;
  HttpRequest request;
  BodyFraming framing;
  bool keep_alive = true;  // what the client asked for
  bool expect_continue = false;
};

// Where the head in `buf` ends (the offset just past the blank line), or nullopt while it is
// incomplete. Blank lines before the request line are part of the head.
std::optional<size_t> FindHeadEnd(std::string_view buf);

// Parses a complete head (request line and header lines, up to and including the blank line).
// `max_target` bounds the request target (414 past it).
HeadResult ParseHead(std::string_view head, size_t max_target);

// Percent-decodes `s`; '+' becomes a space when `plus_is_space`. Malformed escapes stay as sent.
std::string PercentDecode(std::string_view s, bool plus_is_space);

// Decodes a body as it arrives, never holding more than `max_body` bytes of it.
class BodyReader {
 public:
  BodyReader(BodyFraming framing, size_t max_body);

  enum class Progress { kMore, kDone, kTooLarge, kMalformed };
  // Consumes what it can of `in` from `*pos`, moving `*pos` past what it used (bytes after the
  // body's end stay for the next request).
  Progress Feed(std::string_view in, size_t* pos);
  std::string& body() { return body_; }
  // What is wrong when Feed answered kMalformed.
  const std::string& error() const { return error_; }

 private:
  enum class State { kLength, kChunkSize, kChunkData, kChunkEnd, kTrailer, kDone };
  Progress Malformed(std::string message);
  // The next line of `in` from `*pos` without its line break, or nullopt while incomplete.
  static std::optional<std::string_view> Line(std::string_view in, size_t* pos);

  State state_;
  uint64_t left_ = 0;  // bytes of the current chunk (or of the Content-Length body) to come
  size_t max_body_;
  size_t trailer_bytes_ = 0;
  std::string body_;
  std::string error_;
};

// The bytes of an answer: status line, Content-Type, Content-Length, Connection, the body (not
// for HEAD).
std::string SerializeResponse(const HttpResponse& response, bool keep_alive, bool head_request);

}  // namespace paladin::server
