// `paladin image send` and `paladin image receive`: checkpoint images between machines.
#include "paladin/transfer/transfer.h"

#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "paladin/base/size.h"

namespace paladin::cli {
namespace {

void SayImage(const char* command, const std::string& line) {
  std::fprintf(stderr, "paladin image %s: %s\n", command, line.c_str());
}

std::string Rate(uint64_t bytes, double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB/s",
                seconds > 0 ? static_cast<double>(bytes) / seconds / (1 << 20) : 0.0);
  return text;
}

struct SendArgs {
  std::string dir;
  std::string target;
  std::string token_file;
  int streams = 4;
  int retries = 5;
};

// Prints a progress line: done / total and the rate since the previous line.
class ProgressLine {
 public:
  void operator()(const transfer::SendProgress& p) {
    if (p.final) return;
    const double interval = p.elapsed_s - last_s_;
    const uint64_t sent = p.bytes_sent - last_sent_;
    last_s_ = p.elapsed_s;
    last_sent_ = p.bytes_sent;
    const int percent =
        p.bytes_total == 0 ? 100 : static_cast<int>(100 * p.bytes_done / p.bytes_total);
    SayImage("send", base::FormatSize(p.bytes_done) + " / " + base::FormatSize(p.bytes_total) +
                         " (" + std::to_string(percent) + "%), " + Rate(sent, interval));
  }

 private:
  double last_s_ = 0;
  uint64_t last_sent_ = 0;
};

void SaySent(const std::string& dir, const transfer::SendReport& r) {
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.2f s", r.seconds);
  const int again = r.chunks_sent - (r.chunks_total - r.chunks_present_at_start);
  SayImage("send", "sent " + dir + " (" + base::FormatSize(r.bytes_total) + ") in " + seconds +
                       ", " + Rate(r.bytes_total, r.seconds) + "; " +
                       std::to_string(r.chunks_total) + " chunks, " +
                       std::to_string(r.chunks_present_at_start) + " already there, " +
                       std::to_string(again) + " sent again (" + std::to_string(r.chunks_rejected) +
                       " after a bad hash), " + std::to_string(r.reconnects) +
                       " reconnections; receiver: " + r.receiver_message);
}

int RunSend(const SendArgs& a) {
  StatusOr<std::pair<std::string, int>> target = transfer::ParseHostPort(a.target);
  StatusOr<std::string> token = transfer::LoadToken(a.token_file);
  StatusOr<transfer::Fault> fault = transfer::FaultFromEnv();
  for (const Status* s : {&target.status(), &token.status(), &fault.status()}) {
    if (!s->ok()) {
      SayImage("send", s->message());
      return 2;
    }
  }
  transfer::SendOptions options;
  options.token = *token;
  options.streams = a.streams;
  options.retries = a.retries;
  options.fault = *fault;
  auto line = std::make_shared<ProgressLine>();
  StatusOr<transfer::SendReport> report =
      transfer::SendImage(a.dir, target->first, target->second, options,
                          [line](const transfer::SendProgress& p) { (*line)(p); });
  if (!report.ok()) {
    SayImage("send", a.dir + ": " + report.status().message());
    return 1;
  }
  SaySent(a.dir, *report);
  return 0;
}

struct ImageReceiveArgs {
  int port = 0;
  std::string out;
  std::string token_file;
  std::string bind = "127.0.0.1";
  bool once = false;
};

void SayReceived(const transfer::ReceiveReport& r) {
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.2f s", r.seconds);
  SayImage("receive", (r.already_present ? "already had " : "received ") + r.dir + ": " +
                          std::to_string(r.files) + " files, " + base::FormatSize(r.bytes) +
                          ", verified, in " + seconds + " (" + std::to_string(r.chunks_received) +
                          " of " + std::to_string(r.chunks_total) + " chunks received, " +
                          std::to_string(r.chunks_rejected) + " rejected, " +
                          std::to_string(r.resumes) + " resumed connections)");
}

int RunImageReceive(const ImageReceiveArgs& a) {
  StatusOr<std::string> token = transfer::LoadToken(a.token_file);
  StatusOr<transfer::Fault> fault = transfer::FaultFromEnv();
  for (const Status* s : {&token.status(), &fault.status()}) {
    if (!s->ok()) {
      SayImage("receive", s->message());
      return 2;
    }
  }
  transfer::ReceiverOptions options;
  options.out_dir = a.out;
  options.token = *token;
  options.bind_address = a.bind;
  options.port = a.port;
  options.fault = *fault;
  options.log = [](const std::string& line) { SayImage("receive", line); };
  StatusOr<std::unique_ptr<transfer::Receiver>> receiver =
      transfer::Receiver::Listen(std::move(options));
  if (!receiver.ok()) {
    SayImage("receive", receiver.status().message());
    return 1;
  }
  SayImage("receive", "listening on " + a.bind + ":" + std::to_string((*receiver)->port()) +
                          ", images into " + a.out);
  for (;;) {
    StatusOr<transfer::ReceiveReport> report = (*receiver)->ReceiveOne();
    if (report.ok()) SayReceived(*report);
    if (!report.ok()) SayImage("receive", a.out + ": " + report.status().message());
    if (a.once) return report.ok() ? 0 : 1;
  }
}

}  // namespace

void AddImageTransfer(CLI::App* image, int* exit_code) {
  auto s = std::make_shared<SendArgs>();
  CLI::App* send = image->add_subcommand(
      "send", "Send a finished image to `paladin image receive` (parallel, resumable)");
  send->add_option("dir", s->dir, "Image directory (with its manifest.json)")->required();
  send->add_option("target", s->target, "Receiver as HOST:PORT")->required();
  send->add_option("--streams", s->streams, "Parallel connections")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  send->add_option("--token-file", s->token_file,
                   "File holding the shared token (else $PALADIN_TOKEN)");
  send->add_option("--retries", s->retries, "Reconnections per stream without progress")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  send->callback([s, exit_code] { *exit_code = RunSend(*s); });

  auto r = std::make_shared<ImageReceiveArgs>();
  CLI::App* receive = image->add_subcommand(
      "receive", "Accept an image from `paladin image send`, verify it, then write its manifest");
  receive->add_option("--listen", r->port, "Port to listen on (0: any free port, printed)")
      ->required()
      ->check(CLI::Range(0, 65535));
  receive->add_option("--out", r->out, "Image directory to fill (created)")->required();
  receive->add_option("--token-file", r->token_file,
                      "File holding the shared token (else $PALADIN_TOKEN)");
  receive->add_option("--bind", r->bind, "Address to listen on")->capture_default_str();
  receive->add_flag("--once", r->once, "Exit after the first image (0: verified, 1: failed)");
  receive->callback([r, exit_code] { *exit_code = RunImageReceive(*r); });
}

}  // namespace paladin::cli
