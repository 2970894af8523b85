#include "api.h"

#include <chrono>
#include <cstdlib>
#include <functional>
#include <set>

#include "paladin/server/server.h"
#include "paladin/server/validate.h"

namespace paladin::server {
namespace {

// The one Authorization header, whole: the request's header map keeps bytes that
// get_header_value would cut at a NUL. Two headers, or control characters in one, authenticate
// nobody.
std::string AuthorizationHeader(const httplib::Request& req) {
  auto [first, last] = req.headers.equal_range("Authorization");
  if (first == last || std::next(first) != last) return "";
  for (const char c : first->second) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return "";
  }
  return first->second;
}

// Who may call a route.
enum class Access {
  kPublic,  // no token
  kUser,    // admin or team
  kAdmin,   // admin only
  kAgent,   // agent or admin
  kAny,     // any valid token
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

Reply Error(const Status& s) { return Reply{HttpStatus(s), Json{{"error", s.message()}}, "", ""}; }

Reply FromResult(const StatusOr<Json>& r, int ok_status = 200) {
  if (!r.ok()) return Error(r.status());
  return Reply{ok_status, *r, "", ""};
}

void Write(httplib::Response& res, const Reply& reply) {
  res.status = reply.status;
  if (!reply.content_type.empty()) {
    res.set_content(reply.text, reply.content_type.c_str());
    return;
  }
  if (reply.status == 204) return;
  res.set_content(reply.body.dump(-1, ' ', false, Json::error_handler_t::replace),
                  "application/json");
}

StatusOr<Json> ParseBody(const httplib::Request& req) {
  if (req.body.empty()) return Json::object();
  Json body = Json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return InvalidArgument("body: not valid JSON");
  if (!body.is_object()) return InvalidArgument("body: expected a JSON object");
  return body;
}

std::string Param(const httplib::Request& req, const char* key) {
  return req.has_param(key) ? req.get_param_value(key) : "";
}

using Handler = std::function<Reply(const httplib::Request&, const Principal&)>;

class Router {
 public:
  Router(httplib::Server& http, Control& control) : http_(http), control_(control) {}

  void Get(const char* pattern, Access access, Handler h) {
    http_.Get(pattern, Wrap(access, std::move(h)));
  }
  void Post(const char* pattern, Access access, Handler h) {
    http_.Post(pattern, Wrap(access, std::move(h)));
  }
  void Put(const char* pattern, Access access, Handler h) {
    http_.Put(pattern, Wrap(access, std::move(h)));
  }
  void Delete(const char* pattern, Access access, Handler h) {
    http_.Delete(pattern, Wrap(access, std::move(h)));
  }

 private:
  httplib::Server::Handler Wrap(Access access, Handler h) {
    Control* control = &control_;
    return [control, access, h = std::move(h)](const httplib::Request& req,
                                               httplib::Response& res) {
      const auto start = std::chrono::steady_clock::now();
      Reply reply;
      try {
        Principal who;
        bool allowed = true;
        if (access != Access::kPublic) {
          StatusOr<Principal> p = control->Authenticate(BearerSecret(AuthorizationHeader(req)));
          if (!p.ok()) {
            reply = Error(p.status());
            allowed = false;
          } else {
            who = *p;
            const bool ok = access == Access::kAny || (access == Access::kUser && !who.agent()) ||
                            (access == Access::kAdmin && who.admin()) ||
                            (access == Access::kAgent && (who.agent() || who.admin()));
            if (!ok) {
              reply = Error(PermissionDenied("a " + who.Scope() + " token may not " + req.method +
                                             " " + req.path));
              allowed = false;
            }
          }
        }
        if (allowed) reply = h(req, who);
      } catch (const std::exception& e) {
        reply = Error(InvalidArgument(std::string("bad request: ") + e.what()));
      }
      Write(res, reply);
      control->RecordRequest(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    };
  }

  httplib::Server& http_;
  Control& control_;
};

std::string JobId(const httplib::Request& req) { return req.matches[1].str(); }

}  // namespace

void InstallRoutes(httplib::Server& http, Control& control) {
  http.set_payload_max_length(kMaxBodyBytes);
  http.set_error_handler([](const httplib::Request& /*req*/, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message = "HTTP " + std::to_string(res.status);
    if (res.status == 404) message = "no such endpoint";
    if (res.status == 413) message = "body larger than 1 MiB";
    if (res.status == 400) message = "malformed HTTP request";
    res.set_content(Json{{"error", message}}.dump(), "application/json");
  });
  http.set_exception_handler(
      [](const httplib::Request& /*req*/, httplib::Response& res, const std::exception_ptr& /*e*/) {
        res.status = 500;
        res.set_content(Json{{"error", "internal error"}}.dump(), "application/json");
      });
  Router r(http, control);
  Control* c = &control;

  auto page = [](const httplib::Request&, const Principal&) {
    return Reply{200, Json(), DashboardHtml(), "text/html; charset=utf-8"};
  };
  r.Get("/", Access::kPublic, page);
  r.Get("/dashboard.html", Access::kPublic, page);
  r.Get("/healthz", Access::kPublic, [](const httplib::Request&, const Principal&) {
    return Reply{200, Json{{"ok", true}}, "", ""};
  });

  // --- jobs ---
  r.Post("/v1/jobs", Access::kUser, [c](const httplib::Request& req, const Principal& who) {
    StatusOr<Json> body = ParseBody(req);
    if (!body.ok()) return Error(body.status());
    return FromResult(c->Submit(who, *body), 201);
  });
  r.Get("/v1/jobs", Access::kUser, [c](const httplib::Request& req, const Principal& who) {
    const std::string team = Param(req, "team");
    const std::string state = Param(req, "state");
    const std::string all = Param(req, "all");
    if (!team.empty() && !ValidName(team)) return Error(InvalidArgument("team: not a team name"));
    static const std::set<std::string> kStates = {
        "",          "pending",       "starting",     "running",
        "migrating", "checkpointing", "checkpointed", "restoring",
        "succeeded", "failed",        "cancelled"};
    if (kStates.count(state) == 0) {
      return Error(InvalidArgument("state: '" + state.substr(0, 32) + "' is not a job state"));
    }
    StatusOr<std::string> jobs = c->ListJobs(who, team, state, all == "1" || all == "true");
    if (!jobs.ok()) return Error(jobs.status());
    return Reply{200, Json(), std::move(*jobs), "application/json"};
  });
  r.Get(R"(/v1/jobs/([^/]+))", Access::kUser,
        [c](const httplib::Request& req, const Principal& who) {
          return FromResult(c->GetJob(who, JobId(req)));
        });
  r.Get(R"(/v1/jobs/([^/]+)/logs)", Access::kUser,
        [c](const httplib::Request& req, const Principal& who) {
          const std::string stream = req.has_param("stream") ? Param(req, "stream") : "stdout";
          int64_t tail = 0;
          if (req.has_param("tail")) {
            StatusOr<int64_t> n = ParseIntParam(Param(req, "tail"), 0, 10000000, "tail");
            if (!n.ok()) return Error(n.status());
            tail = *n;
          }
          return FromResult(c->Logs(who, JobId(req), stream, tail));
        });
  r.Get(R"(/v1/jobs/([^/]+)/usage)", Access::kUser,
        [c](const httplib::Request& req, const Principal& who) {
          return FromResult(c->Usage(who, JobId(req)));
        });
  r.Get(R"(/v1/jobs/([^/]+)/explain)", Access::kUser,
        [c](const httplib::Request& req, const Principal& who) {
          return FromResult(c->Explain(who, JobId(req)));
        });
  r.Post(R"(/v1/jobs/([^/]+)/cancel)", Access::kUser,
         [c](const httplib::Request& req, const Principal& who) {
           return FromResult(c->Cancel(who, JobId(req)));
         });
  r.Post(R"(/v1/jobs/([^/]+)/migrate)", Access::kUser,
         [c](const httplib::Request& req, const Principal& who) {
           StatusOr<Json> body = ParseBody(req);
           if (!body.ok()) return Error(body.status());
           return FromResult(c->Migrate(who, JobId(req), *body), 202);
         });
  r.Post(R"(/v1/jobs/([^/]+)/checkpoint)", Access::kUser,
         [c](const httplib::Request& req, const Principal& who) {
           return FromResult(c->CheckpointJob(who, JobId(req)), 202);
         });
  r.Post(R"(/v1/jobs/([^/]+)/resume)", Access::kUser,
         [c](const httplib::Request& req, const Principal& who) {
           return FromResult(c->Resume(who, JobId(req)), 202);
         });

  // --- nodes ---
  r.Get("/v1/nodes", Access::kUser,
        [c](const httplib::Request&, const Principal& who) { return FromResult(c->Nodes(who)); });
  r.Post(R"(/v1/nodes/([^/]+)/drain)", Access::kAdmin,
         [c](const httplib::Request& req, const Principal&) {
           const std::string node = req.matches[1].str();
           if (!ValidName(node)) return Error(InvalidArgument("node: not a node name"));
           return FromResult(c->Drain(node));
         });
  r.Post(R"(/v1/nodes/([^/]+)/gpus/([^/]+)/fault)", Access::kAdmin,
         [c](const httplib::Request& req, const Principal&) {
           const std::string node = req.matches[1].str();
           if (!ValidName(node)) return Error(InvalidArgument("node: not a node name"));
           StatusOr<int64_t> gpu = ParseIntParam(req.matches[2].str(), 0, 1023, "gpu index");
           if (!gpu.ok()) return Error(gpu.status());
           StatusOr<Json> body = ParseBody(req);
           if (!body.ok()) return Error(body.status());
           return FromResult(c->Fault(node, static_cast<int>(*gpu), *body));
         });

  // --- events, teams, tokens, views ---
  r.Get("/v1/events", Access::kUser, [c](const httplib::Request& req, const Principal& who) {
    const std::string job = Param(req, "job");
    if (!job.empty()) {
      StatusOr<int64_t> seq = ParseJobId(job);
      if (!seq.ok()) return Error(seq.status());
    }
    double since = 0;
    if (req.has_param("since")) {
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
        [c](const httplib::Request&, const Principal& who) { return FromResult(c->Teams(who)); });
  r.Put(R"(/v1/teams/([^/]+))", Access::kAdmin, [c](const httplib::Request& req, const Principal&) {
    const std::string team = req.matches[1].str();
    if (!ValidName(team))
      return Error(InvalidArgument("team: '" + team.substr(0, 64) + "' is not a team name"));
    StatusOr<Json> body = ParseBody(req);
    if (!body.ok()) return Error(body.status());
    return FromResult(c->PutTeam(team, *body));
  });
  r.Post("/v1/tokens", Access::kAdmin, [c](const httplib::Request& req, const Principal&) {
    StatusOr<Json> body = ParseBody(req);
    if (!body.ok()) return Error(body.status());
    if (!body->contains("scope") || !(*body)["scope"].is_string()) {
      return Error(InvalidArgument("scope: required, one of admin, agent, team:NAME"));
    }
    std::string name;
    if (body->contains("name") && !(*body)["name"].is_null()) {
      if (!(*body)["name"].is_string()) return Error(InvalidArgument("name: expected a string"));
      name = (*body)["name"].get<std::string>();
      if (name.size() > 200) return Error(InvalidArgument("name: longer than 200 characters"));
    }
    return FromResult(c->CreateToken((*body)["scope"].get<std::string>(), name), 201);
  });
  r.Get("/v1/tokens", Access::kAdmin,
        [c](const httplib::Request&, const Principal&) { return FromResult(c->ListTokens()); });
  r.Delete(
      R"(/v1/tokens/([^/]+))", Access::kAdmin, [c](const httplib::Request& req, const Principal&) {
        StatusOr<int64_t> id = ParseIntParam(req.matches[1].str(), 0, int64_t{1} << 50, "token id");
        if (!id.ok()) return Error(id.status());
        Status s = c->DeleteToken(*id);
        if (!s.ok()) return Error(s);
        return Reply{204, Json(), "", ""};
      });
  r.Get("/v1/summary", Access::kUser,
        [c](const httplib::Request&, const Principal& who) { return FromResult(c->Summary(who)); });
  r.Get("/metrics", Access::kAny, [c](const httplib::Request&, const Principal& who) {
    return Reply{200, Json(), c->Metrics(who), "text/plain; version=0.0.4"};
  });

  // --- agents ---
  r.Post("/v1/agents/register", Access::kAgent, [c](const httplib::Request& req, const Principal&) {
    StatusOr<Json> body = ParseBody(req);
    if (!body.ok()) return Error(body.status());
    return FromResult(c->RegisterAgent(*body));
  });
  r.Post(R"(/v1/agents/([^/]+)/heartbeat)", Access::kAgent,
         [c](const httplib::Request& req, const Principal&) {
           const std::string node = req.matches[1].str();
           if (!ValidName(node)) return Error(InvalidArgument("node: not a node name"));
           StatusOr<Json> body = ParseBody(req);
           if (!body.ok()) return Error(body.status());
           return FromResult(c->Heartbeat(node, *body));
         });
  r.Post(R"(/v1/migrations/([^/]+)/commit)", Access::kAgent,
         [c](const httplib::Request& req, const Principal&) {
           StatusOr<int64_t> id =
               ParseIntParam(req.matches[1].str(), 0, int64_t{1} << 50, "migration id");
           if (!id.ok()) return Error(id.status());
           return FromResult(c->Commit(*id));
         });
}

}  // namespace paladin::server
