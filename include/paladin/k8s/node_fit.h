// What a pod asks of the node it runs on, read as the stock scheduler reads it, so that Paladin's
// scheduler places a GPU pod only where Kubernetes itself would let it go (docs/kubernetes.md,
// "A pod's own constraints"): its spec.nodeSelector, its required node affinity and the node's
// taints it must tolerate. Preferences (preferred affinity, PreferNoSchedule) do not rule a node
// out and are not read.
//
// Thread safety: plain values and pure functions.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

#include "paladin/base/status.h"

namespace paladin::k8s {

// One requirement of a node selector term: a label's key (or, for matchFields, metadata.name)
// and an operator of In, NotIn, Exists, DoesNotExist, Gt, Lt.
struct NodeRequirement {
  std::string key;
  std::string op;
  std::vector<std::string> values;
  bool field = false;  // matchFields: the node's metadata.name, not a label
};

struct Toleration {
  std::string key;  // "" with Exists: every taint
  std::string op;   // Equal or Exists
  std::string value;
  std::string effect;  // "": every effect
};

struct NodeConstraints {
  std::vector<std::pair<std::string, std::string>> selector;  // spec.nodeSelector
  // spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms:
  // a node fits when any term holds, a term when all its requirements do.
  bool has_terms = false;
  std::vector<std::vector<NodeRequirement>> terms;
  std::vector<Toleration> tolerations;
};

// A node as the constraints see it.
struct NodeFacts {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;
  struct Taint {
    std::string key, value, effect;
  };
  std::vector<Taint> taints;
};

// Reads a pod's spec (its JSON object). An error names the malformed field, e.g.
// "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]
// .matchExpressions[1].operator: 'Near' is not In, NotIn, Exists, DoesNotExist, Gt or Lt".
StatusOr<NodeConstraints> ReadNodeConstraints(const nlohmann::json& spec);
// Reads a Node object's name, labels and taints; what is malformed is left out.
NodeFacts ReadNodeFacts(const nlohmann::json& node);

// Empty when a pod of `c` may run on the node; else why not, e.g. "taint
// paladin.io/second-node:NoSchedule not tolerated" or "nodeSelector disktype=ssd: label disktype
// is hdd". Taints of effect NoSchedule and NoExecute rule a node out.
std::string NodeMismatch(const NodeConstraints& c, const NodeFacts& node);

}  // namespace paladin::k8s
