// `paladin nodes`, `teams`, `quota`, `tokens` and `move-costs`: the fleet's nodes, its tenants
// and what its moves took.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "fleet.h"
#include "fleet_format.h"
#include "paladin/api/wire.h"
#include "paladin/trace/move_costs.h"

namespace paladin::cli {

namespace key = api::key;

namespace {

using api::Json;
using fleet::Array;
using fleet::Printable;
using fleet::Str;

struct Args {
  FleetFlags flags;
};

uint64_t Sum(const Json& gpus, const char* key) {
  uint64_t total = 0;
  for (const Json& g : gpus) total += fleet::Bytes(g, key).value_or(0);
  return total;
}

int RunNodes(const Args& a) {
  FleetApi api("nodes", a.flags);
  StatusOr<Json> answer = api.Get("/v1/nodes");
  if (!answer.ok()) return api.Fail(answer.status());
  if (api.json()) {
    FleetApi::PrintJson(*answer);
    return 0;
  }
  const double now = FleetNow();
  fleet::Table table(
      {"NAME", "STATE", "ADDRESS", "HEARTBEAT", "GPUS", "ALLOCATED", "USED", "MEMORY", "JOBS"});
  for (const Json& node : Array(*answer, key::kNodes)) {
    const Json& gpus = Array(node, key::kGpus);
    size_t jobs = 0;
    size_t unhealthy = 0;
    for (const Json& g : gpus) {
      jobs += Array(g, key::kJobs).size();
      if (g.contains(key::kHealthy) && g[key::kHealthy].is_boolean() &&
          !g[key::kHealthy].get<bool>()) {
        ++unhealthy;
      }
    }
    std::string gpu_cell = std::to_string(gpus.size());
    if (unhealthy > 0) gpu_cell += " (" + std::to_string(unhealthy) + " unhealthy)";
    table.AddRow({Str(node, key::kName), Str(node, key::kState), Str(node, key::kAddress),
                  fleet::FormatAgo(fleet::Num(node, key::kLastHeartbeat), now), gpu_cell,
                  fleet::FormatBytes(Sum(gpus, key::kAllocatedBytes)),
                  fleet::FormatBytes(Sum(gpus, key::kUsedBytes)),
                  fleet::FormatBytes(Sum(gpus, key::kMemoryBytes)), std::to_string(jobs)});
  }
  if (table.rows() == 0) {
    std::printf("no nodes (start one with paladin agent)\n");
    return 0;
  }
  std::fputs(table.Render().c_str(), stdout);
  return 0;
}

std::string Hours(const Json& usage, const char* key) {
  const std::optional<double> h = fleet::Num(usage, key);
  if (!h.has_value()) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", *h);
  return buf;
}

std::string LimitCell(const Json& team, const char* key, bool bytes) {
  const std::optional<int64_t> v = fleet::Int(team, key);
  if (!v.has_value() || *v < 0) return "-";
  if (*v == 0) return "none";
  return bytes ? fleet::FormatBytes(static_cast<uint64_t>(*v)) : std::to_string(*v);
}

void PrintTeams(const std::vector<Json>& teams) {
  fleet::Table table({"TEAM", "PRIORITY", "MAX-GPUS", "MAX-GPU-MEM", "JOBS", "GPU-HOURS",
                      "MEM-GiB-H-ALLOC", "MEM-GiB-H-USED", "QUEUED"});
  for (const Json& t : teams) {
    const Json& usage = t.contains(key::kUsage) ? t[key::kUsage] : Json();
    const std::optional<int64_t> priority = fleet::Int(t, key::kPriority);
    const std::optional<int64_t> jobs = fleet::Int(usage, key::kJobs);
    table.AddRow({Str(t, key::kName), priority.has_value() ? std::to_string(*priority) : "-",
                  LimitCell(t, key::kMaxGpus, false), LimitCell(t, key::kMaxGpuMemBytes, true),
                  jobs.has_value() ? std::to_string(*jobs) : "-", Hours(usage, key::kGpuHours),
                  Hours(usage, key::kGpuMemHoursAllocated), Hours(usage, key::kGpuMemHoursUsed),
                  fleet::FormatDuration(fleet::Num(usage, key::kQueueSeconds).value_or(0))});
  }
  std::fputs(table.Render().c_str(), stdout);
}

int RunTeams(const Args& a) {
  FleetApi api("teams", a.flags);
  StatusOr<Json> answer = api.Get("/v1/teams");
  if (!answer.ok()) return api.Fail(answer.status());
  if (api.json()) {
    FleetApi::PrintJson(*answer);
    return 0;
  }
  const Json& teams = Array(*answer, key::kTeams);
  if (teams.empty()) {
    std::printf("no teams (an admin makes one with paladin quota TEAM --gpus N)\n");
    return 0;
  }
  PrintTeams(std::vector<Json>(teams.begin(), teams.end()));
  return 0;
}

struct MoveCostsArgs {
  FleetFlags flags;
  std::string out;  // "": standard output
};

// The fleet's measured moves as the CSV `paladin sim dynamic --move-costs` reads
// (docs/formats/move_costs.md); every row checked as that reader checks it.
int RunMoveCosts(const MoveCostsArgs& a) {
  FleetApi api("move-costs", a.flags);
  StatusOr<Json> answer = api.Get("/v1/move-costs");
  if (!answer.ok()) return api.Fail(answer.status());
  if (api.json()) {
    FleetApi::PrintJson(*answer);
    return 0;
  }
  std::vector<trace::MeasuredMove> moves;
  for (const Json& m : Array(*answer, key::kMoves)) {
    moves.push_back(
        {Str(m, key::kFrom),
         Str(m, key::kTo),
         {fleet::Num(m, key::kGpuBytes).value_or(-1), fleet::Num(m, key::kHostBytes).value_or(-1),
          fleet::Num(m, key::kPauseS).value_or(-1)}});
  }
  const std::string csv = trace::MoveCostsCsv(moves);
  StatusOr<std::vector<trace::MeasuredMove>> back =
      trace::ParseMoveCosts(csv, "the server's answer");
  if (!back.ok()) return api.Fail(back.status());
  if (a.out.empty()) {
    std::fputs(csv.c_str(), stdout);
    return 0;
  }
  std::FILE* f = std::fopen(a.out.c_str(), "w");
  if (f == nullptr || std::fputs(csv.c_str(), f) < 0 || std::fclose(f) != 0) {
    return api.Fail(IoError("cannot write " + a.out));
  }
  std::fprintf(stderr, "paladin move-costs: %zu measured moves written to %s\n", moves.size(),
               a.out.c_str());
  return 0;
}

struct QuotaArgs {
  FleetFlags flags;
  std::string team;
  std::optional<int> gpus;
  std::string gpu_mem;
  std::optional<int> priority;
};

int RunQuota(const QuotaArgs& a) {
  FleetApi api("quota", a.flags);
  const bool update = a.gpus.has_value() || !a.gpu_mem.empty() || a.priority.has_value();
  Json body = Json::object();
  if (a.gpus.has_value()) body[key::kMaxGpus] = *a.gpus;
  if (!a.gpu_mem.empty()) {
    StatusOr<uint64_t> bytes = fleet::ParseSizeFlag("--gpu-mem", a.gpu_mem, /*allow_zero=*/true);
    if (!bytes.ok()) return api.Fail(bytes.status());
    body[key::kMaxGpuMem] = *bytes;
  }
  if (a.priority.has_value()) body[key::kPriority] = *a.priority;

  // The current settings: an update sends them back with the changed fields, so a flag left
  // out keeps its value whatever the server does with absent fields.
  StatusOr<Json> answer = api.Get("/v1/teams");
  if (!answer.ok()) return api.Fail(answer.status());
  Json current;
  for (const Json& t : Array(*answer, key::kTeams)) {
    if (Str(t, key::kName) == a.team) current = t;
  }
  if (!update) {
    if (current.is_null()) return api.Fail(NotFound("no team '" + Printable(a.team) + "'"));
    if (api.json()) {
      FleetApi::PrintJson(current);
    } else {
      PrintTeams({current});
    }
    return 0;
  }
  if (!current.is_null()) {
    if (!body.contains(key::kMaxGpus) && fleet::Int(current, key::kMaxGpus).has_value()) {
      body[key::kMaxGpus] = *fleet::Int(current, key::kMaxGpus);
    }
    if (!body.contains(key::kMaxGpuMem) &&
        fleet::Bytes(current, key::kMaxGpuMemBytes).has_value()) {
      body[key::kMaxGpuMem] = *fleet::Bytes(current, key::kMaxGpuMemBytes);
    }
    if (!body.contains(key::kPriority) && fleet::Int(current, key::kPriority).has_value()) {
      body[key::kPriority] = *fleet::Int(current, key::kPriority);
    }
  }
  StatusOr<Json> team = api.Put("/v1/teams/" + fleet::Escape(a.team), body);
  if (!team.ok()) return api.Fail(team.status());
  if (api.json()) {
    FleetApi::PrintJson(*team);
  } else {
    PrintTeams({*team});
  }
  return 0;
}

// --- tokens ---

struct TokenArgs {
  FleetFlags flags;
  std::string scope;
  std::string name;
  std::string id;
};

int RunTokensList(const TokenArgs& a) {
  FleetApi api("tokens", a.flags);
  StatusOr<Json> answer = api.Get("/v1/tokens");
  if (!answer.ok()) return api.Fail(answer.status());
  if (api.json()) {
    FleetApi::PrintJson(*answer);
    return 0;
  }
  const double now = FleetNow();
  fleet::Table table({"ID", "NAME", "SCOPE", "CREATED"});
  for (const Json& t : Array(*answer, key::kTokens)) {
    table.AddRow({Str(t, key::kId), Str(t, key::kName), Str(t, key::kScope),
                  fleet::FormatAgo(fleet::Num(t, key::kCreatedAt), now)});
  }
  std::fputs(table.Render().c_str(), stdout);
  return 0;
}

Status CheckScope(const std::string& scope) {
  if (scope == "admin" || scope == "agent") return Status::Ok();
  if (scope.rfind("team:", 0) == 0 && scope.size() > 5) return Status::Ok();
  if (scope.rfind("agent:", 0) == 0 && scope.size() > 6) return Status::Ok();
  return InvalidArgument("--scope '" + Printable(scope) +
                         "': expected admin, agent, agent:NODE or team:NAME");
}

int RunTokensCreate(const TokenArgs& a) {
  FleetApi api("tokens", a.flags);
  const Status scope = CheckScope(a.scope);
  if (!scope.ok()) return api.Fail(scope);
  Json body = {{key::kScope, a.scope}};
  if (!a.name.empty()) body[key::kName] = a.name;
  StatusOr<Json> answer = api.Post("/v1/tokens", body);
  if (!answer.ok()) return api.Fail(answer.status());
  if (api.json()) {
    FleetApi::PrintJson(*answer);
    return 0;
  }
  // The secret alone on stdout (TOKEN=$(paladin tokens create ...)); the rest on stderr.
  std::printf("%s\n", Printable(Str(*answer, key::kToken)).c_str());
  api.Say(Printable("created token " + Str(*answer, key::kId) + " (scope " +
                    Str(*answer, key::kScope, a.scope) + "); its secret is shown only this once"));
  return 0;
}

int RunTokensRevoke(const TokenArgs& a) {
  FleetApi api("tokens", a.flags);
  StatusOr<Json> answer = api.Delete("/v1/tokens/" + fleet::Escape(a.id));
  if (!answer.ok()) return api.Fail(answer.status());
  if (api.json()) {
    FleetApi::PrintJson(answer->is_null() ? Json{{"revoked", a.id}} : *answer);
  } else {
    std::printf("revoked token %s\n", Printable(a.id).c_str());
  }
  return 0;
}

}  // namespace

void RegisterFleetAdmin(CLI::App& app, int* exit_code) {
  auto n = std::make_shared<Args>();
  CLI::App* nodes = app.add_subcommand(
      "nodes", "List the fleet's nodes: state, last heartbeat, GPUs, memory allocated and used");
  AddFleetFlags(nodes, &n->flags);
  nodes->callback([n, exit_code] { *exit_code = Guarded("nodes", [&] { return RunNodes(*n); }); });

  auto t = std::make_shared<Args>();
  CLI::App* teams = app.add_subcommand(
      "teams", "Teams with their quotas and usage (GPU hours, memory hours, queue time)");
  AddFleetFlags(teams, &t->flags);
  teams->callback([t, exit_code] { *exit_code = Guarded("teams", [&] { return RunTeams(*t); }); });

  auto mc = std::make_shared<MoveCostsArgs>();
  CLI::App* move_costs = app.add_subcommand(
      "move-costs",
      "The fleet's finished moves with their measured pauses, as CSV for paladin sim dynamic "
      "--move-costs (admin)");
  AddFleetFlags(move_costs, &mc->flags);
  move_costs->add_option("--out", mc->out, "Write the CSV to this file (default: standard output)");
  move_costs->callback(
      [mc, exit_code] { *exit_code = Guarded("move-costs", [&] { return RunMoveCosts(*mc); }); });

  auto q = std::make_shared<QuotaArgs>();
  CLI::App* quota = app.add_subcommand(
      "quota",
      "Show a team's quota, or set it with --gpus/--gpu-mem/--priority (admin; creates the "
      "team)");
  quota->add_option("team", q->team, "Team name")->required();
  quota->add_option("--gpus", q->gpus, "Most GPUs the team's jobs may hold at once (0: no limit)")
      ->check(CLI::NonNegativeNumber);
  quota->add_option("--gpu-mem", q->gpu_mem,
                    "Most GPU memory the team's jobs may hold, e.g. 160GiB (0: no limit)");
  quota->add_option("--priority", q->priority, "The team's priority (higher is placed first)");
  AddFleetFlags(quota, &q->flags);
  quota->callback([q, exit_code] { *exit_code = Guarded("quota", [&] { return RunQuota(*q); }); });

  CLI::App* tokens = app.add_subcommand("tokens", "API tokens: list, create, revoke (admin)");
  tokens->require_subcommand(1);
  auto tl = std::make_shared<TokenArgs>();
  CLI::App* list = tokens->add_subcommand("list", "List tokens (never their secrets)");
  AddFleetFlags(list, &tl->flags);
  list->callback(
      [tl, exit_code] { *exit_code = Guarded("tokens", [&] { return RunTokensList(*tl); }); });

  auto tc = std::make_shared<TokenArgs>();
  CLI::App* create = tokens->add_subcommand(
      "create", "Create a token; prints its secret (pal_...) once, on stdout");
  create
      ->add_option("--scope", tc->scope,
                   "admin, team:NAME, agent:NODE (one node's agent) or agent (every node's)")
      ->required();
  create->add_option("--name", tc->name, "A name to recognise it by");
  AddFleetFlags(create, &tc->flags);
  create->callback(
      [tc, exit_code] { *exit_code = Guarded("tokens", [&] { return RunTokensCreate(*tc); }); });

  auto tr = std::make_shared<TokenArgs>();
  CLI::App* revoke = tokens->add_subcommand("revoke", "Revoke a token: it stops working at once");
  revoke->add_option("id", tr->id, "Token id (from tokens list)")->required();
  AddFleetFlags(revoke, &tr->flags);
  revoke->callback(
      [tr, exit_code] { *exit_code = Guarded("tokens", [&] { return RunTokensRevoke(*tr); }); });
}

}  // namespace paladin::cli
