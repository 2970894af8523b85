#include "emucuda/control_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>

#include "emucuda/host_process.h"

namespace paladin::emucuda {
namespace {

constexpr const char* kRequestHeader = "paladin-emucuda-request 1";
constexpr const char* kStateHeader = "paladin-emucuda-state 1";
constexpr size_t kMaxPairs = 64;

struct OpName {
  ControlOp op;
  const char* name;
};
constexpr OpName kOps[] = {{ControlOp::kQuery, "query"},
                           {ControlOp::kLock, "lock"},
                           {ControlOp::kCheckpoint, "checkpoint"},
                           {ControlOp::kRestore, "restore"},
                           {ControlOp::kUnlock, "unlock"}};

constexpr const char* kStateNames[] = {"RUNNING", "LOCKED", "CHECKPOINTED", "FAILED"};

std::string Hex(const CUuuid& uuid) {
  char text[33];
  for (size_t i = 0; i < 16; ++i) {
    std::snprintf(text + 2 * i, 3, "%02x", static_cast<unsigned char>(uuid.bytes[i]));
  }
  return text;
}

bool ParseHex(std::string_view text, CUuuid* uuid) {
  if (text.size() != 32) return false;
  for (size_t i = 0; i < 16; ++i) {
    char byte[3] = {text[2 * i], text[2 * i + 1], '\0'};
    char* end = nullptr;
    long value = std::strtol(byte, &end, 16);
    if (end != byte + 2) return false;
    uuid->bytes[i] = static_cast<char>(value);
  }
  return true;
}

bool ParseNumber(std::string_view text, uint64_t* value) {
  if (text.empty() || text.size() > 20) return false;
  std::string copy(text);
  char* end = nullptr;
  errno = 0;
  *value = std::strtoull(copy.c_str(), &end, 10);
  return errno == 0 && end == copy.c_str() + copy.size() && copy[0] != '-';
}

// Calls visit(key, value) for each "key value" line after the header; false on a bad header.
template <typename Visit>
bool ForEachLine(const std::string& text, const char* header, Visit visit) {
  std::string_view rest = text;
  bool first = true;
  while (!rest.empty()) {
    size_t end = rest.find('\n');
    std::string_view line = rest.substr(0, end);
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end + 1);
    if (first) {
      if (line != header) return false;
      first = false;
      continue;
    }
    size_t space = line.find(' ');
    if (space == std::string_view::npos) continue;
    if (!visit(line.substr(0, space), line.substr(space + 1))) return false;
  }
  return !first;
}

bool ParseOp(std::string_view name, ControlOp* op) {
  for (const OpName& entry : kOps) {
    if (name == entry.name) {
      *op = entry.op;
      return true;
    }
  }
  return false;
}

const char* OpText(ControlOp op) {
  for (const OpName& entry : kOps) {
    if (entry.op == op) return entry.name;
  }
  return "query";
}

bool ParsePair(std::string_view value, GpuPair* pair) {
  size_t space = value.find(' ');
  return space != std::string_view::npos && ParseHex(value.substr(0, space), &pair->old_uuid) &&
         ParseHex(value.substr(space + 1), &pair->new_uuid);
}

bool ParseStateName(std::string_view name, CUprocessState* state) {
  for (int i = 0; i < 4; ++i) {
    if (name == kStateNames[i]) {
      *state = i;
      return true;
    }
  }
  return false;
}

}  // namespace

int ControlSignal() { return SIGRTMAX - 3; }

std::string RequestPath(const std::string& dir, uint32_t pid) {
  return dir + "/" + std::to_string(pid) + ".req";
}

std::string StateFilePath(const std::string& dir, uint32_t pid) {
  return dir + "/" + std::to_string(pid) + ".state";
}

void EnsureControlDir(const std::string& dir) { mkdir(dir.c_str(), 0777); }

bool WriteFileAtomically(const std::string& path, const std::string& text) {
  std::string temporary = path + ".tmp" + std::to_string(getpid());
  int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return false;
  bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  if (written && rename(temporary.c_str(), path.c_str()) == 0) return true;
  unlink(temporary.c_str());
  return false;
}

std::string FormatRequest(const ControlRequest& request) {
  std::string text = std::string(kRequestHeader) + "\n";
  text += "seq " + std::to_string(request.seq) + "\n";
  text += std::string("op ") + OpText(request.op) + "\n";
  text += "timeout_ms " + std::to_string(request.timeout_ms) + "\n";
  for (const GpuPair& pair : request.pairs) {
    text += "pair " + Hex(pair.old_uuid) + " " + Hex(pair.new_uuid) + "\n";
  }
  if (!request.state_path.empty()) text += "state_path " + request.state_path + "\n";
  if (request.host_pid != 0) {
    text += "host_pid " + std::to_string(request.host_pid) + "\n";
    text += "host_tid " + std::to_string(request.host_tid) + "\n";
    text += "start_time " + std::to_string(request.start_time) + "\n";
  }
  return text;
}

bool ParseRequest(const std::string& text, ControlRequest* request) {
  *request = ControlRequest{};
  bool has_seq = false;
  bool has_op = false;
  bool ok = ForEachLine(text, kRequestHeader, [&](std::string_view key, std::string_view value) {
    uint64_t number = 0;
    if (key == "seq") {
      has_seq = ParseNumber(value, &request->seq);
      return has_seq;
    }
    if (key == "op") {
      has_op = ParseOp(value, &request->op);
      return has_op;
    }
    if (key == "timeout_ms") {
      if (!ParseNumber(value, &number) || number > UINT32_MAX) return false;
      request->timeout_ms = static_cast<uint32_t>(number);
      return true;
    }
    if (key == "host_pid" || key == "host_tid") {
      if (!ParseNumber(value, &number) || number == 0 || number > INT32_MAX) return false;
      (key == "host_pid" ? request->host_pid : request->host_tid) = static_cast<uint32_t>(number);
      return true;
    }
    if (key == "start_time") return ParseNumber(value, &request->start_time);
    if (key == "state_path") {
      if (value.empty() || value[0] != '/' || value.size() > 4096) return false;
      request->state_path = std::string(value);
      return true;
    }
    if (key == "pair") {
      GpuPair pair{};
      if (request->pairs.size() >= kMaxPairs || !ParsePair(value, &pair)) return false;
      request->pairs.push_back(pair);
    }
    return true;
  });
  return ok && has_seq && has_op;
}

bool FindRequestBySeq(const std::string& dir, uint64_t seq, ControlRequest* request,
                      std::string* path) {
  DIR* folder = opendir(dir.c_str());
  if (folder == nullptr) return false;
  bool found = false;
  while (dirent* entry = readdir(folder)) {
    std::string_view name = entry->d_name;
    if (name.size() < 5 || name.substr(name.size() - 4) != ".req") continue;
    uint64_t pid = 0;
    std::string text;
    ControlRequest candidate;
    std::string candidate_path = dir + "/" + std::string(name);
    if (!ParseNumber(name.substr(0, name.size() - 4), &pid) ||
        !ReadSmallFile(candidate_path, &text) || !ParseRequest(text, &candidate) ||
        candidate.seq != seq || candidate.host_pid != pid) {
      continue;
    }
    *request = std::move(candidate);
    *path = std::move(candidate_path);
    found = true;
    break;
  }
  closedir(folder);
  return found;
}

std::string FormatState(const ControlState& state) {
  char text[256];
  std::snprintf(text, sizeof(text),
                "%s\npid %" PRIu32 "\nstart_time %" PRIu64 "\ntid %" PRIu32 "\nseq %" PRIu64
                "\nstate %s\nresult %d\n",
                kStateHeader, state.pid, state.start_time, state.tid, state.seq,
                kStateNames[state.state >= 0 && state.state < 4 ? state.state : 3], state.result);
  return text;
}

bool ParseState(const std::string& text, ControlState* state) {
  *state = ControlState{};
  int fields = 0;
  bool ok = ForEachLine(text, kStateHeader, [&](std::string_view key, std::string_view value) {
    uint64_t number = 0;
    if (key == "state") {
      ++fields;
      return ParseStateName(value, &state->state);
    }
    if (key != "pid" && key != "start_time" && key != "tid" && key != "seq" && key != "result") {
      return true;
    }
    if (!ParseNumber(value, &number)) return false;
    ++fields;
    if (key == "pid") state->pid = static_cast<uint32_t>(number);
    if (key == "start_time") state->start_time = number;
    if (key == "tid") state->tid = static_cast<uint32_t>(number);
    if (key == "seq") state->seq = number;
    if (key == "result") state->result = static_cast<CUresult>(number);
    return true;
  });
  return ok && fields == 6;
}

}  // namespace paladin::emucuda
