// Parsing of what the transfer's callers hand in: fault specs, tokens, addresses.
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "paladin/transfer/transfer.h"

namespace paladin::transfer {

namespace {

// A positive count after "name:"; false when the text is not one.
bool ParseCount(const std::string& text, int* out) {
  if (text.empty() || text.size() > 9) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  *out = std::atoi(text.c_str());
  return *out > 0;
}

}  // namespace

StatusOr<Fault> ParseFault(const std::string& spec) {
  Fault fault;
  if (spec.empty()) return fault;
  if (spec == "refuse") {
    fault.refuse_commit = true;
    return fault;
  }
  const size_t colon = spec.find(':');
  const std::string name = spec.substr(0, colon);
  const std::string count = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (name == "drop-after" && ParseCount(count, &fault.drop_after_chunks)) return fault;
  if (name == "corrupt-chunk" && ParseCount(count, &fault.corrupt_chunk)) return fault;
  if (name == "forge-chunk" && ParseCount(count, &fault.forge_chunk)) return fault;
  if (name == "alter-list" && ParseCount(count, &fault.alter_list)) return fault;
  return InvalidArgument(
      "PALADIN_TRANSFER_FAULT: '" + spec +
      "' is not drop-after:N, corrupt-chunk:N, forge-chunk:N, alter-list:N or refuse");
}

StatusOr<Fault> FaultFromEnv() {
  const char* spec = std::getenv("PALADIN_TRANSFER_FAULT");
  return ParseFault(spec == nullptr ? "" : spec);
}

StatusOr<std::string> LoadToken(const std::string& token_file) {
  std::string token;
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    if (!in) return NotFound("cannot read the token file " + token_file);
    std::ostringstream text;
    text << in.rdbuf();
    token = text.str();
    while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) {
      token.pop_back();
    }
    if (token.empty()) return InvalidArgument("the token file " + token_file + " is empty");
    return token;
  }
  const char* env = std::getenv("PALADIN_TOKEN");
  if (env != nullptr) token = env;
  if (token.empty())
    return InvalidArgument("no token: give --token-file FILE or set PALADIN_TOKEN");
  return token;
}

StatusOr<std::pair<std::string, int>> ParseHostPort(const std::string& text) {
  std::string host;
  std::string port;
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find("]:");
    if (close == std::string::npos) return InvalidArgument("'" + text + "' is not [ADDRESS]:PORT");
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos || text.find(':') != colon) {
      return InvalidArgument("'" + text + "' is not HOST:PORT");
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  int number = 0;
  if (host.empty() || !ParseCount(port, &number) || number > 65535) {
    return InvalidArgument("'" + text + "' is not HOST:PORT (a port from 1 to 65535)");
  }
  return std::make_pair(host, number);
}

}  // namespace paladin::transfer
