#include "paladin/k8s/node_fit.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "json_fields.h"

namespace paladin::k8s {
namespace {

using Json = nlohmann::json;

constexpr char kTermsField[] =
    "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms";

// A label value read as Gt and Lt compare them: a whole number in a long's range.
bool ParseLong(const std::string& text, long* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  *out = std::strtol(text.c_str(), &end, 10);
  return errno == 0 && end != text.c_str() && *end == '\0';
}

std::string Quoted(const Json& j) {
  return j.is_string() ? "'" + j.get<std::string>() + "'" : j.dump();
}

StatusOr<std::vector<NodeRequirement>> ReadRequirements(const Json& list, const std::string& where,
                                                        bool field) {
  std::vector<NodeRequirement> out;
  if (list.is_null()) return out;
  if (!list.is_array()) return InvalidArgument(where + ": not a list");
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    const Json& e = list[i];
    if (!e.is_object()) return InvalidArgument(at + ": not an object");
    NodeRequirement r;
    r.field = field;
    r.key = Str(e, "key");
    r.op = Str(e, "operator");
    if (r.key.empty()) return InvalidArgument(at + ".key: missing");
    static const char* const kOps[] = {"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"};
    if (std::find(std::begin(kOps), std::end(kOps), r.op) == std::end(kOps)) {
      return InvalidArgument(at + ".operator: " + Quoted(e.value("operator", Json())) +
                             " is not In, NotIn, Exists, DoesNotExist, Gt or Lt");
    }
    if (field && (r.key != "metadata.name" || (r.op != "In" && r.op != "NotIn"))) {
      return InvalidArgument(at + ": a field requirement is metadata.name with In or NotIn");
    }
    const Json values = e.value("values", Json::array());
    if (!values.is_array()) return InvalidArgument(at + ".values: not a list");
    for (const Json& v : values) {
      if (!v.is_string()) return InvalidArgument(at + ".values: " + v.dump() + " is not a string");
      r.values.push_back(v.get<std::string>());
    }
    long ignored = 0;
    if ((r.op == "Gt" || r.op == "Lt") &&
        (r.values.size() != 1 || !ParseLong(r.values[0], &ignored))) {
      return InvalidArgument(at + ".values: " + r.op + " takes one whole number");
    }
    if ((r.op == "Exists" || r.op == "DoesNotExist") && !r.values.empty()) {
      return InvalidArgument(at + ".values: " + r.op + " takes none");
    }
    if ((r.op == "In" || r.op == "NotIn") && r.values.empty()) {
      return InvalidArgument(at + ".values: " + r.op + " takes at least one");
    }
    out.push_back(std::move(r));
  }
  return out;
}

const std::string* Label(const NodeFacts& node, const std::string& key) {
  for (const auto& [k, v] : node.labels) {
    if (k == key) return &v;
  }
  return nullptr;
}

// Empty when the node meets `r`, else what the node has instead.
std::string Unmet(const NodeRequirement& r, const NodeFacts& node) {
  const std::string* value = r.field ? &node.name : Label(node, r.key);
  const std::string has = value == nullptr ? "no label " + r.key
                          : r.field        ? "name " + *value
                                           : "label " + r.key + "=" + *value;
  const bool listed =
      value != nullptr && std::find(r.values.begin(), r.values.end(), *value) != r.values.end();
  long number = 0, bound = 0;
  bool met = false;
  if (r.op == "In") {
    met = listed;
  } else if (r.op == "NotIn") {
    met = !listed;
  } else if (r.op == "Exists") {
    met = value != nullptr;
  } else if (r.op == "DoesNotExist") {
    met = value == nullptr;
  } else if (value != nullptr && ParseLong(*value, &number) && ParseLong(r.values.at(0), &bound)) {
    met = r.op == "Gt" ? number > bound : number < bound;
  }
  return met ? "" : has;
}

std::string Describe(const NodeRequirement& r) {
  std::string values;
  for (const std::string& v : r.values) values += (values.empty() ? "" : ",") + v;
  return r.key + " " + r.op + (values.empty() ? "" : " (" + values + ")");
}

bool Tolerates(const Toleration& t, const NodeFacts::Taint& taint) {
  if (!t.effect.empty() && t.effect != taint.effect) return false;
  if (t.op == "Exists") return t.key.empty() || t.key == taint.key;
  return t.key == taint.key && t.value == taint.value;
}

}  // namespace

StatusOr<NodeConstraints> ReadNodeConstraints(const Json& spec) {
  NodeConstraints c;
  if (!spec.is_object()) return c;
  if (auto s = spec.find("nodeSelector"); s != spec.end() && !s->is_null()) {
    if (!s->is_object()) return InvalidArgument("spec.nodeSelector: not an object");
    for (const auto& [k, v] : s->items()) {
      if (!v.is_string()) {
        return InvalidArgument("spec.nodeSelector[" + k + "]: " + v.dump() + " is not a string");
      }
      c.selector.emplace_back(k, v.get<std::string>());
    }
  }
  const Json affinity = spec.value("affinity", Json::object());
  const Json node_affinity =
      affinity.is_object() ? affinity.value("nodeAffinity", Json::object()) : Json::object();
  const Json required =
      node_affinity.is_object()
          ? node_affinity.value("requiredDuringSchedulingIgnoredDuringExecution", Json())
          : Json();
  if (required.is_object()) {
    const Json terms = required.value("nodeSelectorTerms", Json::array());
    if (!terms.is_array()) return InvalidArgument(std::string(kTermsField) + ": not a list");
    c.has_terms = true;
    for (size_t i = 0; i < terms.size(); ++i) {
      const std::string at = std::string(kTermsField) + "[" + std::to_string(i) + "]";
      if (!terms[i].is_object()) return InvalidArgument(at + ": not an object");
      StatusOr<std::vector<NodeRequirement>> labels = ReadRequirements(
          terms[i].value("matchExpressions", Json()), at + ".matchExpressions", false);
      if (!labels.ok()) return labels.status();
      StatusOr<std::vector<NodeRequirement>> fields =
          ReadRequirements(terms[i].value("matchFields", Json()), at + ".matchFields", true);
      if (!fields.ok()) return fields.status();
      labels->insert(labels->end(), fields->begin(), fields->end());
      c.terms.push_back(std::move(*labels));
    }
  }
  const Json tolerations = spec.value("tolerations", Json::array());
  if (!tolerations.is_array()) return InvalidArgument("spec.tolerations: not a list");
  for (size_t i = 0; i < tolerations.size(); ++i) {
    const Json& t = tolerations[i];
    const std::string at = "spec.tolerations[" + std::to_string(i) + "]";
    if (!t.is_object()) return InvalidArgument(at + ": not an object");
    Toleration tol{Str(t, "key"), Str(t, "operator"), Str(t, "value"), Str(t, "effect")};
    if (tol.op.empty()) tol.op = "Equal";
    if (tol.op != "Equal" && tol.op != "Exists") {
      return InvalidArgument(at + ".operator: " + Quoted(t.value("operator", Json())) +
                             " is not Equal or Exists");
    }
    if (tol.op == "Equal" && tol.key.empty()) {
      return InvalidArgument(at + ".key: an Equal toleration names its key");
    }
    c.tolerations.push_back(std::move(tol));
  }
  return c;
}

NodeFacts ReadNodeFacts(const Json& node) {
  NodeFacts f;
  if (!node.is_object()) return f;
  const Json meta = node.value("metadata", Json::object());
  f.name = Str(meta, "name");
  const Json labels = meta.is_object() ? meta.value("labels", Json::object()) : Json::object();
  if (labels.is_object()) {
    for (const auto& [k, v] : labels.items()) {
      if (v.is_string()) f.labels.emplace_back(k, v.get<std::string>());
    }
  }
  const Json spec = node.value("spec", Json::object());
  const Json taints = spec.is_object() ? spec.value("taints", Json::array()) : Json::array();
  for (const Json& t : taints.is_array() ? taints : Json::array()) {
    if (t.is_object() && !Str(t, "key").empty()) {
      f.taints.push_back({Str(t, "key"), Str(t, "value"), Str(t, "effect")});
    }
  }
  return f;
}

std::string NodeMismatch(const NodeConstraints& c, const NodeFacts& node) {
  for (const auto& [key, want] : c.selector) {
    const std::string* has = Label(node, key);
    if (has == nullptr || *has != want) {
      std::string why = "nodeSelector ";
      why.append(key).append("=").append(want).append(": ");
      if (has == nullptr) {
        why.append("no label ").append(key);
      } else {
        why.append("label ").append(key).append(" is ").append(*has);
      }
      return why;
    }
  }
  if (c.has_terms) {
    std::string first;
    bool any = false;
    for (const std::vector<NodeRequirement>& term : c.terms) {
      std::string unmet;
      for (const NodeRequirement& r : term) {
        if (std::string has = Unmet(r, node); !has.empty()) {
          unmet = Describe(r) + ": " + has;
          break;
        }
      }
      // A term without requirements selects no node.
      if (unmet.empty() && term.empty()) unmet = "an empty term";
      if (unmet.empty()) {
        any = true;
        break;
      }
      if (first.empty()) first = unmet;
    }
    if (!any) {
      return "required node affinity: " + (first.empty() ? std::string("no term") : first) +
             (c.terms.size() > 1
                  ? " (and " + std::to_string(c.terms.size() - 1) + " other term(s) unmet)"
                  : "");
    }
  }
  for (const NodeFacts::Taint& taint : node.taints) {
    if (taint.effect != "NoSchedule" && taint.effect != "NoExecute") continue;
    const bool tolerated = std::any_of(c.tolerations.begin(), c.tolerations.end(),
                                       [&](const Toleration& t) { return Tolerates(t, taint); });
    if (!tolerated) {
      return "taint " + taint.key + (taint.value.empty() ? "" : "=" + taint.value) + ":" +
             taint.effect + " not tolerated";
    }
  }
  return "";
}

}  // namespace paladin::k8s
