#include "api.h"

#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "paladin/api/wire.h"
#include "paladin/server/server.h"
#include "paladin/server/validate.h"

namespace paladin::server {

namespace key = api::key;

namespace {

// The one Authorization header, whole (the front keeps every byte of it). Two headers, or
// control characters in one, authenticate nobody.
std::string AuthorizationHeader(const HttpRequest& req) {
  const std::vector<std::string> values = req.HeaderValues("Authorization");
  if (values.size() != 1) return "";
  for (const char c : values[0]) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return "";
  }
  return values[0];
}

// Who may call a route.
enum class Access {
  kPublic,  // no token
  kUser,    // admin or team
  kAdmin,   // admin only
  kAgent,   // agent or admin
  // Agent or admin, as the node the path names (its first "*"): a node's token (agent:NODE) for
  // that node only. Refused from the head, before the body is read.
  kAgentOfPathNode,
  kAny,  // any valid token
};

struct Reply {  // NOLINT(bugprone-exception-escape): Json's members
  int status = 200;
  Json body;
  std::string text;  // when not JSON
  std::string content_type;
};

int HttpStatus(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
      return 400;
    case StatusCode::kUnauthenticated:
      return 401;
    case StatusCode::kPermissionDenied:
      return 403;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kFailedPrecondition:
    case StatusCode::kAlreadyExists:
    case StatusCode::kResourceExhausted:
      return 409;
    case StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

Reply Error(const Status& s) {
  return Reply{HttpStatus(s), Json{{key::kError, s.message()}}, "", ""};
}

Reply FromResult(const StatusOr<Json>& r, int ok_status = 200) {
  if (!r.ok()) return Error(r.status());
  return Reply{ok_status, *r, "", ""};
}

HttpResponse ToResponse(const Reply& reply) {
  if (!reply.content_type.empty())
    return HttpResponse{reply.status, reply.content_type, reply.text};
  if (reply.status == 204) return HttpResponse{204, "", ""};
  return HttpResponse{reply.status, "application/json",
                      reply.body.dump(-1, ' ', false, Json::error_handler_t::replace)};
}

StatusOr<Json> ParseBody(const HttpRequest& req) {
  if (req.body.empty()) return Json::object();
  Json body = Json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return InvalidArgument("body: not valid JSON");
  if (!body.is_object()) return InvalidArgument("body: expected a JSON object");
  return body;
}

std::string Param(const HttpRequest& req, const char* key) { return req.Param(key); }

using Handler = std::function<Reply(const HttpRequest&, const Principal&)>;

// Routes are patterns of path segments: "*" matches one non-empty segment, which the handler
// finds in req.matches. A route is chosen, and its caller authenticated, from the head alone:
// the body of a request that is refused is never read (http_front.h).
class Router {
 public:
  explicit Router(Control& control) : control_(control) {}

  void Get(const char* pattern, Access access, const Handler& h) { Add("GET", pattern, access, h); }
  void Post(const char* pattern, Access access, const Handler& h) {
    Add("POST", pattern, access, h);
  }
  void Put(const char* pattern, Access access, const Handler& h) { Add("PUT", pattern, access, h); }
  void Delete(const char* pattern, Access access, const Handler& h) {
    Add("DELETE", pattern, access, h);
  }

  HttpAdmission Admit(HttpRequest& req) const {
    const std::string method = req.method == "HEAD" ? "GET" : req.method;
    const std::vector<std::string_view> path = Segments(req.path);
    for (const Route& route : routes_) {
      if (route.method != method || !Match(route.segments, path, &req.matches)) continue;
      return Admit(route, req);
    }
    return HttpAdmission{ToResponse(Error(NotFound("no such endpoint"))), nullptr};
  }

 private:
  struct Route {
    std::string method;
    std::vector<std::string> segments;
    Access access;
    Handler handler;
  };

  static std::vector<std::string_view> Segments(std::string_view path) {
    std::vector<std::string_view> out;
    size_t start = 0;
    while (true) {
      const size_t slash = path.find('/', start);
      out.push_back(path.substr(start, slash - start));
      if (slash == std::string_view::npos) return out;
      start = slash + 1;
    }
  }

  static bool Match(const std::vector<std::string>& pattern,
                    const std::vector<std::string_view>& path, std::vector<std::string>* matches) {
    if (pattern.size() != path.size()) return false;
    std::vector<std::string> captured;
    for (size_t i = 0; i < pattern.size(); ++i) {
      if (pattern[i] == "*") {
        if (path[i].empty()) return false;
        captured.emplace_back(path[i]);
      } else if (pattern[i] != path[i]) {
        return false;
      }
    }
    matches->clear();
    std::string whole;
    for (size_t i = 0; i < path.size(); ++i) whole += (i == 0 ? "" : "/") + std::string(path[i]);
    matches->push_back(std::move(whole));
    for (std::string& c : captured) matches->push_back(std::move(c));
    return true;
  }

  void Add(const char* method, const char* pattern, Access access, const Handler& h) {
    std::vector<std::string> segments;
    for (std::string_view s : Segments(pattern)) segments.emplace_back(s);
    routes_.push_back(Route{method, std::move(segments), access, h});
  }

  HttpAdmission Admit(const Route& route, const HttpRequest& req) const {
    Principal who;
    if (route.access != Access::kPublic) {
      StatusOr<Principal> p = control_.Authenticate(BearerSecret(AuthorizationHeader(req)));
      if (!p.ok()) return HttpAdmission{ToResponse(Error(p.status())), nullptr};
      who = *p;
      const Access a = route.access;
      const bool agent_route = a == Access::kAgent || a == Access::kAgentOfPathNode;
      const bool ok = a == Access::kAny || (a == Access::kUser && !who.agent()) ||
                      (a == Access::kAdmin && who.admin()) ||
                      (agent_route && (who.agent() || who.admin()));
      if (!ok) {
        return HttpAdmission{
            ToResponse(Error(PermissionDenied("a " + who.Scope() + " token may not " + req.method +
                                              " " + req.path))),
            nullptr};
      }
      if (a == Access::kAgentOfPathNode) {
        const std::string& node = req.matches[1];
        const Status speaks = CheckSpeaksFor(
            who, node, "heartbeat as " + (ValidName(node) ? node : std::string("another node")));
        if (!speaks.ok()) return HttpAdmission{ToResponse(Error(speaks)), nullptr};
      }
    }
    Control* control = &control_;
    const Handler* handler = &route.handler;
    return HttpAdmission{
        std::nullopt, [control, handler, who](const HttpRequest& full) {
          const auto start = std::chrono::steady_clock::now();
          Reply reply;
          try {
            reply = (*handler)(full, who);
          } catch (const std::exception& e) {
            reply = Error(InvalidArgument(std::string("bad request: ") + e.what()));
          }
          control->RecordRequest(
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
          return ToResponse(reply);
        }};
  }

  Control& control_;
  std::vector<Route> routes_;
};

std::string JobId(const HttpRequest& req) { return req.matches[1]; }

}  // namespace

HttpAdmit MakeRoutes(Control& control, PodBook& pods) {
  auto router = std::make_shared<Router>(control);
  Router& r = *router;
  Control* c = &control;
  PodBook* book = &pods;

  auto page = [](const HttpRequest&, const Principal&) {
    return Reply{200, Json(), DashboardHtml(), "text/html; charset=utf-8"};
  };
  r.Get("/", Access::kPublic, page);
  r.Get("/dashboard.html", Access::kPublic, page);
  r.Get("/healthz", Access::kPublic, [](const HttpRequest&, const Principal&) {
    return Reply{200, Json{{key::kOk, true}}, "", ""};
  });

  // --- jobs ---
  r.Post("/v1/jobs", Access::kUser, [c](const HttpRequest& req, const Principal& who) {
    StatusOr<Json> body = ParseBody(req);
    if (!body.ok()) return Error(body.status());
    return FromResult(c->Submit(who, *body), 201);
  });
  r.Get("/v1/jobs", Access::kUser, [c](const HttpRequest& req, const Principal& who) {
    const std::string team = Param(req, "team");
    const std::string state = Param(req, "state");
    const std::string all = Param(req, "all");
    if (!team.empty() && !ValidName(team)) return Error(InvalidArgument("team: not a team name"));
    if (!state.empty() && !ParseJobState(state).has_value()) {
      return Error(InvalidArgument("state: '" + state.substr(0, 32) + "' is not a job state"));
    }
    StatusOr<std::string> jobs = c->ListJobs(who, team, state, all == "1" || all == "true");
    if (!jobs.ok()) return Error(jobs.status());
    return Reply{200, Json(), std::move(*jobs), "application/json"};
  });
  r.Get("/v1/jobs/*", Access::kUser, [c](const HttpRequest& req, const Principal& who) {
    return FromResult(c->GetJob(who, JobId(req)));
  });
  r.Get("/v1/jobs/*/logs", Access::kUser, [c](const HttpRequest& req, const Principal& who) {
    const std::string stream = req.HasParam("stream") ? Param(req, "stream") : "stdout";
    int64_t tail = 0;
    if (req.HasParam("tail")) {
      StatusOr<int64_t> n = ParseIntParam(Param(req, "tail"), 0, 10000000, "tail");
      if (!n.ok()) return Error(n.status());
      tail = *n;
    }
    return FromResult(c->Logs(who, JobId(req), stream, tail));
  });
  r.Get("/v1/jobs/*/usage", Access::kUser, [c](const HttpRequest& req, const Principal& who) {
    return FromResult(c->Usage(who, JobId(req)));
  });
  r.Get("/v1/jobs/*/explain", Access::kUser, [c](const HttpRequest& req, const Principal& who) {
    return FromResult(c->Explain(who, JobId(req)));
  });
  r.Post("/v1/jobs/*/cancel", Access::kUser, [c](const HttpRequest& req, const Principal& who) {
    return FromResult(c->Cancel(who, JobId(req)));
  });
  r.Post("/v1/jobs/*/migrate", Access::kUser, [c](const HttpRequest& req, const Principal& who) {
    StatusOr<Json> body = ParseBody(req);
    if (!body.ok()) return Error(body.status());
    return FromResult(c->Migrate(who, JobId(req), *body), 202);
  });
  r.Post("/v1/jobs/*/checkpoint", Access::kUser, [c](const HttpRequest& req, const Principal& who) {
    return FromResult(c->CheckpointJob(who, JobId(req)), 202);
  });
  r.Post("/v1/jobs/*/resume", Access::kUser, [c](const HttpRequest& req, const Principal& who) {
    return FromResult(c->Resume(who, JobId(req)), 202);
  });

  // --- nodes ---
  r.Get("/v1/nodes", Access::kUser,
        [c](const HttpRequest&, const Principal& who) { return FromResult(c->Nodes(who)); });
  r.Post("/v1/nodes/*/drain", Access::kAdmin, [c](const HttpRequest& req, const Principal&) {
    const std::string node = req.matches[1];
    if (!ValidName(node)) return Error(InvalidArgument("node: not a node name"));
    return FromResult(c->Drain(node));
  });
  r.Post("/v1/nodes/*/gpus/*/fault", Access::kAdmin, [c](const HttpRequest& req, const Principal&) {
    const std::string node = req.matches[1];
    if (!ValidName(node)) return Error(InvalidArgument("node: not a node name"));
    StatusOr<int64_t> gpu = ParseIntParam(req.matches[2], 0, 1023, "gpu index");
    if (!gpu.ok()) return Error(gpu.status());
    StatusOr<Json> body = ParseBody(req);
    if (!body.ok()) return Error(body.status());
    return FromResult(c->Fault(node, static_cast<int>(*gpu), *body));
  });

  // --- events, teams, tokens, views ---
  r.Get("/v1/events", Access::kUser, [c](const HttpRequest& req, const Principal& who) {
    const std::string job = Param(req, "job");
    if (!job.empty()) {
      StatusOr<int64_t> seq = ParseJobId(job);
      if (!seq.ok()) return Error(seq.status());
    }
    double since = 0;
    if (req.HasParam("since")) {
      const std::string text = Param(req, "since");
      char* end = nullptr;
      since = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' || !(since >= 0) || since > 1e12) {
        return Error(InvalidArgument("since: expected an event id or a Unix time"));
      }
    }
    return FromResult(c->Events(who, job, since));
  });
  r.Get("/v1/teams", Access::kUser,
        [c](const HttpRequest&, const Principal& who) { return FromResult(c->Teams(who)); });
  r.Put("/v1/teams/*", Access::kAdmin, [c](const HttpRequest& req, const Principal&) {
    const std::string team = req.matches[1];
    if (!ValidName(team))
      return Error(InvalidArgument("team: '" + team.substr(0, 64) + "' is not a team name"));
    StatusOr<Json> body = ParseBody(req);
    if (!body.ok()) return Error(body.status());
    return FromResult(c->PutTeam(team, *body));
  });
  r.Post("/v1/tokens", Access::kAdmin, [c](const HttpRequest& req, const Principal&) {
    StatusOr<Json> body = ParseBody(req);
    if (!body.ok()) return Error(body.status());
    if (!body->contains(key::kScope) || !(*body)[key::kScope].is_string()) {
      return Error(InvalidArgument("scope: required, one of admin, agent, agent:NODE, team:NAME"));
    }
    std::string name;
    if (body->contains(key::kName) && !(*body)[key::kName].is_null()) {
      if (!(*body)[key::kName].is_string())
        return Error(InvalidArgument("name: expected a string"));
      name = (*body)[key::kName].get<std::string>();
      if (name.size() > 200) return Error(InvalidArgument("name: longer than 200 characters"));
    }
    return FromResult(c->CreateToken((*body)[key::kScope].get<std::string>(), name), 201);
  });
  r.Get("/v1/tokens", Access::kAdmin,
        [c](const HttpRequest&, const Principal&) { return FromResult(c->ListTokens()); });
  r.Delete("/v1/tokens/*", Access::kAdmin, [c](const HttpRequest& req, const Principal&) {
    StatusOr<int64_t> id = ParseIntParam(req.matches[1], 0, int64_t{1} << 50, "token id");
    if (!id.ok()) return Error(id.status());
    Status s = c->DeleteToken(*id);
    if (!s.ok()) return Error(s);
    return Reply{204, Json(), "", ""};
  });
  r.Get("/v1/summary", Access::kUser,
        [c](const HttpRequest&, const Principal& who) { return FromResult(c->Summary(who)); });
  r.Get("/v1/move-costs", Access::kAdmin, [c](const HttpRequest&, const Principal&) {
    return Reply{200, c->MoveCosts(), "", ""};
  });
  r.Get("/metrics", Access::kAny, [c, book](const HttpRequest&, const Principal& who) {
    return Reply{200, Json(), c->Metrics(who) + book->Metrics(who), "text/plain; version=0.0.4"};
  });

  // --- pods of Kubernetes clusters, as Paladin's scheduler reports them ---
  r.Put("/v1/pods", Access::kAdmin, [book](const HttpRequest& req, const Principal&) {
    StatusOr<Json> body = ParseBody(req);
    if (!body.ok()) return Error(body.status());
    StatusOr<api::PodList> list = api::DecodePodList(*body);
    if (!list.ok()) return Error(list.status());
    Status s = book->Replace(*list);
    if (!s.ok()) return Error(s);
    return Reply{200, Json{{key::kPods, list->pods.size()}}, "", ""};
  });
  r.Get("/v1/pods", Access::kUser, [book](const HttpRequest& req, const Principal& who) {
    const std::string team = Param(req, "team");
    if (!team.empty() && !ValidName(team)) return Error(InvalidArgument("team: not a team name"));
    return Reply{200, book->List(who, team), "", ""};
  });
  // The size an `auto` pod (or job) of a class would get now, from what and why (design 7).
  r.Get("/v1/sizing", Access::kUser, [c](const HttpRequest& req, const Principal& who) {
    return FromResult(c->Sizing(who, Param(req, "team"), Param(req, "command")));
  });
  r.Get("/v1/pods/*/*", Access::kUser, [book](const HttpRequest& req, const Principal& who) {
    return FromResult(book->Get(who, req.matches[1], req.matches[2]));
  });
  // Moves of pods asked through the server, carried out by the mover of the pod's node
  // (`paladin k8s mover`, docs/kubernetes.md "Moves through Paladin's server").
  r.Post("/v1/pods/*/*/move", Access::kUser, [book](const HttpRequest& req, const Principal& who) {
    StatusOr<Json> body = ParseBody(req);  // none: the packer's choice on the pod's node
    if (!body.ok()) return Error(body.status());
    StatusOr<api::PodMoveAsk> ask = api::DecodePodMoveAsk(*body);
    if (!ask.ok()) return Error(ask.status());
    return FromResult(book->AskMove(who, req.matches[1], req.matches[2], *ask), 202);
  });
  // A node drained through the server: each of its running pods asked to move to another node,
  // carried out by the node's mover, which cordons the node first.
  r.Post("/v1/pods/drain", Access::kAdmin, [book](const HttpRequest& req, const Principal& who) {
    StatusOr<Json> body = ParseBody(req);
    if (!body.ok()) return Error(body.status());
    StatusOr<api::PodDrainAsk> ask = api::DecodePodDrainAsk(*body);
    if (!ask.ok()) return Error(ask.status());
    return FromResult(book->Drain(who, *ask), 202);
  });
  r.Get("/v1/pod-moves", Access::kAny, [book](const HttpRequest& req, const Principal& who) {
    const std::string node = Param(req, "node");
    if (!node.empty() && !ValidName(node)) return Error(InvalidArgument("node: not a node name"));
    const std::string cluster = Param(req, "cluster");
    if (!cluster.empty() && !ValidName(cluster)) {
      return Error(InvalidArgument("cluster: not a cluster name"));
    }
    std::optional<api::PodMoveState> state;
    if (const std::string s = Param(req, "state"); !s.empty()) {
      state = api::PodMoveStateNamed(s);
      if (!state) return Error(InvalidArgument("state: expected requested, taken, done or failed"));
    }
    return Reply{200, book->Moves(who, node, state, cluster), "", ""};
  });
  r.Get("/v1/pod-moves/*", Access::kAny, [book](const HttpRequest& req, const Principal& who) {
    StatusOr<int64_t> id = ParseIntParam(req.matches[1], 1, int64_t{1} << 53, "move id");
    if (!id.ok()) return Error(id.status());
    return FromResult(book->Move(who, *id));
  });
  r.Post("/v1/pod-moves/*/take", Access::kAgent,
         [book](const HttpRequest& req, const Principal& who) {
           StatusOr<int64_t> id = ParseIntParam(req.matches[1], 1, int64_t{1} << 53, "move id");
           if (!id.ok()) return Error(id.status());
           StatusOr<Json> body = ParseBody(req);
           if (!body.ok()) return Error(body.status());
           const Json mover = body->value(key::kMover, Json());
           if (!mover.is_string() || !ValidName(mover.get<std::string>())) {
             return Error(InvalidArgument("mover: expected the mover's name (its node's)"));
           }
           return FromResult(book->TakeMove(who, *id, mover.get<std::string>()));
         });
  r.Post("/v1/pod-moves/*/finish", Access::kAgent,
         [book](const HttpRequest& req, const Principal& who) {
           StatusOr<int64_t> id = ParseIntParam(req.matches[1], 1, int64_t{1} << 53, "move id");
           if (!id.ok()) return Error(id.status());
           StatusOr<Json> body = ParseBody(req);
           if (!body.ok()) return Error(body.status());
           StatusOr<api::PodMoveOutcome> outcome = api::DecodePodMoveOutcome(*body);
           if (!outcome.ok()) return Error(outcome.status());
           return FromResult(book->FinishMove(who, *id, *outcome));
         });

  // --- agents ---
  // A node's token (agent:NODE) speaks for its node only: the name it registers, the node whose
  // heartbeat it sends (checked from the head), the migrations it is a party to (control).
  r.Post("/v1/agents/register", Access::kAgent, [c](const HttpRequest& req, const Principal& who) {
    StatusOr<Json> body = ParseBody(req);
    if (!body.ok()) return Error(body.status());
    return FromResult(c->RegisterAgent(who, *body));
  });
  r.Post("/v1/agents/*/heartbeat", Access::kAgentOfPathNode,
         [c](const HttpRequest& req, const Principal& who) {
           const std::string node = req.matches[1];
           if (!ValidName(node)) return Error(InvalidArgument("node: not a node name"));
           StatusOr<Json> body = ParseBody(req);
           if (!body.ok()) return Error(body.status());
           return FromResult(c->Heartbeat(who, node, *body));
         });
  r.Post(
      "/v1/migrations/*/commit", Access::kAgent, [c](const HttpRequest& req, const Principal& who) {
        StatusOr<int64_t> id = ParseIntParam(req.matches[1], 0, int64_t{1} << 50, "migration id");
        if (!id.ok()) return Error(id.status());
        return FromResult(c->Commit(who, *id));
      });
  r.Post(
      "/v1/migrations/*/abort", Access::kAgent, [c](const HttpRequest& req, const Principal& who) {
        StatusOr<int64_t> id = ParseIntParam(req.matches[1], 0, int64_t{1} << 50, "migration id");
        if (!id.ok()) return Error(id.status());
        return FromResult(c->AbortUnlessCommitted(who, *id));
      });
  return [router](HttpRequest& head) { return router->Admit(head); };
}

}  // namespace paladin::server
