#include "http_wire.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "paladin/api/wire.h"

namespace paladin::server {
namespace {

constexpr size_t kMaxHeaders = 100;
constexpr size_t kMaxChunkLine = 1024;
constexpr size_t kMaxTrailerBytes = 16 << 10;

bool EqualsNoCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// RFC 9110 token characters: what a method or a header name may be made of.
bool IsToken(std::string_view s) {
  if (s.empty()) return false;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) != 0) continue;
    if (std::string_view("!#$%&'*+-.^_`|~").find(c) == std::string_view::npos) return false;
  }
  return true;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Whether the comma-separated header value list contains `token`.
bool HasToken(const std::vector<std::string>& values, std::string_view token) {
  for (const std::string& value : values) {
    std::string_view rest = value;
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      if (EqualsNoCase(Trim(rest.substr(0, comma)), token)) return true;
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  return false;
}

HeadResult HeadError(int status, std::string message) {
  HeadResult r;
  r.error_status = status;
  r.error = std::move(message);
  return r;
}

// Content-Length and Transfer-Encoding: one framing or a 4xx. Two framings (the request
// smuggling classic) or a length that is not plain digits are refused, not guessed at.
HeadResult Frame(HeadResult r) {
  const std::vector<std::string> te = r.request.HeaderValues("Transfer-Encoding");
  const std::vector<std::string> cl = r.request.HeaderValues("Content-Length");
  if (!te.empty() && !cl.empty()) {
    return HeadError(400, "both Transfer-Encoding and Content-Length: one framing only");
  }
  if (!te.empty()) {
    if (te.size() != 1 || !EqualsNoCase(Trim(te[0]), "chunked")) {
      return HeadError(501, "Transfer-Encoding: only 'chunked' is supported");
    }
    r.framing.chunked = true;
    return r;
  }
  for (const std::string& value : cl) {
    const std::string_view digits = Trim(value);
    if (digits.empty() || digits.size() > 18 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return HeadError(400, "Content-Length: expected a decimal byte count");
    }
    const uint64_t n = std::stoull(std::string(digits));
    if (&value != &cl.front() && n != r.framing.content_length) {
      return HeadError(400, "Content-Length: two different values");
    }
    r.framing.content_length = n;
  }
  return r;
}

}  // namespace

std::string HttpRequest::Param(const std::string& key) const {
  auto it = params.find(key);
  return it == params.end() ? "" : it->second;
}

std::vector<std::string> HttpRequest::HeaderValues(std::string_view name) const {
  std::vector<std::string> out;
  for (const auto& [key, value] : headers) {
    if (EqualsNoCase(key, name)) out.push_back(value);
  }
  return out;
}

HttpResponse HttpError(int status, std::string_view message) {
  std::string json = std::string("{\"") + api::key::kError + "\": \"";
  for (const char c : message) {
    if (c == '"' || c == '\\') {
      json += '\\';
      json += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      json += escaped;
    } else {
      json += c;
    }
  }
  json += "\"}";
  return HttpResponse{status, "application/json", std::move(json)};
}

std::optional<size_t> FindHeadEnd(std::string_view buf) {
  size_t start = 0;
  // Blank lines before the request line (RFC 9112 2.2 lets a server skip them).
  while (start < buf.size() && (buf[start] == '\r' || buf[start] == '\n')) ++start;
  for (size_t nl = buf.find('\n', start); nl != std::string_view::npos;
       nl = buf.find('\n', nl + 1)) {
    const size_t next = nl + 1;
    if (next < buf.size() && buf[next] == '\n') return next + 1;
    if (next + 1 < buf.size() && buf[next] == '\r' && buf[next + 1] == '\n') return next + 2;
  }
  return std::nullopt;
}

std::string PercentDecode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      const int hi = HexValue(s[i + 1]);
      const int lo = HexValue(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
        continue;
      }
    }
    out += (plus_is_space && s[i] == '+') ? ' ' : s[i];
  }
  return out;
}

HeadResult ParseHead(std::string_view head, size_t max_target) {
  std::vector<std::string_view> lines;
  while (!head.empty() && (head.front() == '\r' || head.front() == '\n')) head.remove_prefix(1);
  while (!head.empty()) {
    const size_t nl = head.find('\n');
    std::string_view line = head.substr(0, nl);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) break;
    lines.push_back(line);
    if (nl == std::string_view::npos) break;
    head.remove_prefix(nl + 1);
  }
  if (lines.empty()) return HeadError(400, "malformed HTTP request: no request line");

  HeadResult r;
  const std::string_view request_line = lines[0];
  const size_t sp1 = request_line.find(' ');
  const size_t sp2 = request_line.rfind(' ');
  if (sp1 == std::string_view::npos || sp1 == sp2) {
    return HeadError(400, "malformed HTTP request: expected METHOD TARGET HTTP/1.x");
  }
  const std::string_view method = request_line.substr(0, sp1);
  const std::string_view target = request_line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = request_line.substr(sp2 + 1);
  if (!IsToken(method)) return HeadError(400, "malformed HTTP request: bad method");
  if (target.size() > max_target) return HeadError(414, "request target too long");
  if (target.empty() || target.front() != '/' ||
      target.find_first_of(" \r") != std::string_view::npos) {
    return HeadError(400, "malformed HTTP request: the target must be a path");
  }
  if (version == "HTTP/1.1") {
    r.request.minor_version = 1;
  } else if (version == "HTTP/1.0") {
    r.request.minor_version = 0;
  } else {
    return HeadError(505, "only HTTP/1.0 and HTTP/1.1 are served");
  }
  r.request.method = std::string(method);
  r.request.target = std::string(target);
  const size_t question = target.find('?');
  r.request.path = PercentDecode(target.substr(0, question), false);
  if (question != std::string_view::npos) {
    std::string_view query = target.substr(question + 1);
    while (!query.empty()) {
      const size_t amp = query.find('&');
      const std::string_view pair = query.substr(0, amp);
      if (!pair.empty()) {
        const size_t eq = pair.find('=');
        r.request.params.emplace(
            PercentDecode(pair.substr(0, eq), true),
            eq == std::string_view::npos ? "" : PercentDecode(pair.substr(eq + 1), true));
      }
      if (amp == std::string_view::npos) break;
      query.remove_prefix(amp + 1);
    }
  }

  if (lines.size() - 1 > kMaxHeaders) return HeadError(431, "more than 100 header lines");
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string_view line = lines[i];
    if (line.front() == ' ' || line.front() == '\t') {
      return HeadError(400, "malformed HTTP request: folded header line");
    }
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || !IsToken(line.substr(0, colon))) {
      return HeadError(400, "malformed HTTP request: bad header line");
    }
    if (line.find('\r') != std::string_view::npos) {
      return HeadError(400, "malformed HTTP request: bare CR in a header");
    }
    r.request.headers.emplace_back(std::string(line.substr(0, colon)),
                                   std::string(Trim(line.substr(colon + 1))));
  }

  const std::vector<std::string> connection = r.request.HeaderValues("Connection");
  r.keep_alive = r.request.minor_version == 1 ? !HasToken(connection, "close")
                                              : HasToken(connection, "keep-alive");
  r.expect_continue = HasToken(r.request.HeaderValues("Expect"), "100-continue");
  return Frame(std::move(r));
}

BodyReader::BodyReader(BodyFraming framing, size_t max_body)
    : state_(framing.chunked ? State::kChunkSize : State::kLength),
      left_(framing.chunked ? 0 : framing.content_length),
      max_body_(max_body) {
  if (!framing.chunked && framing.content_length == 0) state_ = State::kDone;
}

BodyReader::Progress BodyReader::Malformed(std::string message) {
  error_ = std::move(message);
  return Progress::kMalformed;
}

std::optional<std::string_view> BodyReader::Line(std::string_view in, size_t* pos) {
  const size_t nl = in.find('\n', *pos);
  if (nl == std::string_view::npos) return std::nullopt;
  std::string_view line = in.substr(*pos, nl - *pos);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  *pos = nl + 1;
  return line;
}

BodyReader::Progress BodyReader::Feed(std::string_view in, size_t* pos) {
  while (true) {
    switch (state_) {
      case State::kDone:
        return Progress::kDone;
      case State::kLength:
      case State::kChunkData: {
        if (left_ > max_body_ - std::min(max_body_, body_.size())) return Progress::kTooLarge;
        const size_t take = std::min<uint64_t>(left_, in.size() - *pos);
        body_.append(in.substr(*pos, take));
        *pos += take;
        left_ -= take;
        if (left_ > 0) return Progress::kMore;
        state_ = state_ == State::kLength ? State::kDone : State::kChunkEnd;
        break;
      }
      case State::kChunkSize: {
        std::optional<std::string_view> line = Line(in, pos);
        if (!line) {
          return in.size() - *pos > kMaxChunkLine ? Malformed("chunk size line too long")
                                                  : Progress::kMore;
        }
        if (line->size() > kMaxChunkLine) return Malformed("chunk size line too long");
        const std::string_view size = Trim(line->substr(0, line->find(';')));
        if (size.empty() || size.size() > 15) return Malformed("chunk size: expected hex digits");
        uint64_t n = 0;
        for (const char c : size) {
          const int v = HexValue(c);
          if (v < 0) return Malformed("chunk size: expected hex digits");
          n = n * 16 + static_cast<uint64_t>(v);
        }
        left_ = n;
        state_ = n == 0 ? State::kTrailer : State::kChunkData;
        break;
      }
      case State::kChunkEnd: {
        const size_t before = *pos;
        std::optional<std::string_view> line = Line(in, pos);
        if (!line) {
          return in.size() - before >= 2 ? Malformed("chunk not followed by CRLF")
                                         : Progress::kMore;
        }
        if (!line->empty()) return Malformed("chunk longer than its size");
        state_ = State::kChunkSize;
        break;
      }
      case State::kTrailer: {
        const size_t before = *pos;
        std::optional<std::string_view> line = Line(in, pos);
        if (!line) {
          return trailer_bytes_ + in.size() - before > kMaxTrailerBytes
                     ? Malformed("trailer too long")
                     : Progress::kMore;
        }
        trailer_bytes_ += *pos - before;
        if (trailer_bytes_ > kMaxTrailerBytes) return Malformed("trailer too long");
        if (line->empty()) state_ = State::kDone;
        break;
      }
    }
  }
}

std::string SerializeResponse(const HttpResponse& response, bool keep_alive, bool head_request) {
  const char* reason = "Unknown";
  switch (response.status) {
    // clang-format off
    case 100: reason = "Continue"; break;
    case 200: reason = "OK"; break;
    case 201: reason = "Created"; break;
    case 202: reason = "Accepted"; break;
    case 204: reason = "No Content"; break;
    case 400: reason = "Bad Request"; break;
    case 401: reason = "Unauthorized"; break;
    case 403: reason = "Forbidden"; break;
    case 404: reason = "Not Found"; break;
    case 408: reason = "Request Timeout"; break;
    case 409: reason = "Conflict"; break;
    case 413: reason = "Content Too Large"; break;
    case 414: reason = "URI Too Long"; break;
    case 431: reason = "Request Header Fields Too Large"; break;
    case 500: reason = "Internal Server Error"; break;
    case 501: reason = "Not Implemented"; break;
    case 503: reason = "Service Unavailable"; break;
    case 505: reason = "HTTP Version Not Supported"; break;
    // clang-format on
    default:
      break;
  }
  std::string out = "HTTP/1.1 " + std::to_string(response.status) + " " + reason + "\r\n";
  const bool no_body = response.status == 204 || response.status == 304;
  if (!no_body) {
    if (!response.content_type.empty()) out += "Content-Type: " + response.content_type + "\r\n";
    out += "Content-Length: " + std::to_string(response.body.size()) + "\r\n";
  }
  out += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  if (!no_body && !head_request) out += response.body;
  return out;
}

}  // namespace paladin::server
