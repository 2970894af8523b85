// A pod's own constraints on its node, read as the stock scheduler reads them (k8s/node_fit.h):
// nodeSelector, required node affinity with each operator and matchFields, taints and
// tolerations by key, value and effect, and the malformed field named.
#include "paladin/k8s/node_fit.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace paladin::k8s {
namespace {

using Json = nlohmann::json;

NodeFacts Facts(const Json& labels, const Json& taints = Json::array()) {
  return ReadNodeFacts(
      {{"metadata", {{"name", "gpu-a"}, {"labels", labels}}}, {"spec", {{"taints", taints}}}});
}

NodeConstraints Read(const Json& spec) {
  StatusOr<NodeConstraints> c = ReadNodeConstraints(spec);
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? *c : NodeConstraints();
}

Json Affinity(const Json& terms) {
  return {{"nodeAffinity",
           {{"requiredDuringSchedulingIgnoredDuringExecution", {{"nodeSelectorTerms", terms}}}}}};
}

TEST(NodeFit, NodeSelectorNeedsEveryLabel) {
  const NodeFacts node = Facts({{"zone", "x"}, {"disk", "ssd"}});
  EXPECT_EQ(NodeMismatch(Read({{"nodeSelector", {{"zone", "x"}, {"disk", "ssd"}}}}), node), "");
  EXPECT_EQ(NodeMismatch(Read({{"nodeSelector", {{"zone", "x"}, {"disk", "hdd"}}}}), node),
            "nodeSelector disk=hdd: label disk is ssd");
  EXPECT_EQ(NodeMismatch(Read({{"nodeSelector", {{"rack", "1"}}}}), node),
            "nodeSelector rack=1: no label rack");
  EXPECT_EQ(NodeMismatch(Read(Json::object()), node), "");
}

TEST(NodeFit, RequiredAffinityAnyTermAllRequirements) {
  const NodeFacts node = Facts({{"zone", "x"}, {"gen", "9"}});
  auto fits = [&](const Json& terms) {
    return NodeMismatch(Read({{"affinity", Affinity(terms)}}), node);
  };
  const Json zone_y = {{"key", "zone"}, {"operator", "In"}, {"values", {"y"}}};
  const Json zone_x = {{"key", "zone"}, {"operator", "In"}, {"values", {"x", "y"}}};
  EXPECT_EQ(fits({{{"matchExpressions", {zone_x}}}}), "");
  EXPECT_EQ(fits({{{"matchExpressions", {zone_y}}}}),
            "required node affinity: zone In (y): label zone=x");
  // Terms are ORed, a term's requirements ANDed.
  EXPECT_EQ(fits({{{"matchExpressions", {zone_y}}}, {{"matchExpressions", {zone_x}}}}), "");
  EXPECT_NE(fits({{{"matchExpressions", {zone_x, zone_y}}}}), "");
  EXPECT_EQ(
      fits({{{"matchExpressions", {{{"key", "zone"}, {"operator", "NotIn"}, {"values", {"y"}}}}}}}),
      "");
  EXPECT_EQ(
      fits({{{"matchExpressions", {{{"key", "rack"}, {"operator", "NotIn"}, {"values", {"1"}}}}}}}),
      "");
  EXPECT_EQ(fits({{{"matchExpressions", {{{"key", "gen"}, {"operator", "Exists"}}}}}}), "");
  EXPECT_NE(fits({{{"matchExpressions", {{{"key", "gen"}, {"operator", "DoesNotExist"}}}}}}), "");
  EXPECT_EQ(
      fits({{{"matchExpressions", {{{"key", "gen"}, {"operator", "Gt"}, {"values", {"8"}}}}}}}),
      "");
  EXPECT_NE(
      fits({{{"matchExpressions", {{{"key", "gen"}, {"operator", "Lt"}, {"values", {"9"}}}}}}}),
      "");
  // A label that is no number meets neither Gt nor Lt.
  EXPECT_NE(
      fits({{{"matchExpressions", {{{"key", "zone"}, {"operator", "Gt"}, {"values", {"1"}}}}}}}),
      "");
  EXPECT_EQ(fits({{{"matchFields",
                    {{{"key", "metadata.name"}, {"operator", "In"}, {"values", {"gpu-a"}}}}}}}),
            "");
  EXPECT_EQ(fits({{{"matchFields",
                    {{{"key", "metadata.name"}, {"operator", "NotIn"}, {"values", {"gpu-a"}}}}}}}),
            "required node affinity: metadata.name NotIn (gpu-a): name gpu-a");
  // A term without requirements selects no node.
  EXPECT_NE(fits(Json::array({Json::object()})), "");
}

TEST(NodeFit, TaintsOfNoScheduleAndNoExecuteNeedATolerance) {
  const NodeFacts node =
      Facts(Json::object(), {{{"key", "dedicated"}, {"value", "ml"}, {"effect", "NoSchedule"}},
                             {{"key", "soft"}, {"effect", "PreferNoSchedule"}}});
  EXPECT_EQ(NodeMismatch(Read(Json::object()), node),
            "taint dedicated=ml:NoSchedule not tolerated");
  auto with = [&](const Json& toleration) {
    return NodeMismatch(Read({{"tolerations", {toleration}}}), node);
  };
  EXPECT_EQ(with({{"key", "dedicated"}, {"operator", "Exists"}}), "");
  EXPECT_EQ(with({{"key", "dedicated"}, {"value", "ml"}}), "");  // Equal by default
  EXPECT_EQ(with({{"key", "dedicated"}, {"value", "ml"}, {"effect", "NoSchedule"}}), "");
  EXPECT_NE(with({{"key", "dedicated"}, {"value", "web"}}), "");
  EXPECT_NE(with({{"key", "dedicated"}, {"operator", "Exists"}, {"effect", "NoExecute"}}), "");
  EXPECT_EQ(with({{"operator", "Exists"}}), "");  // no key: every taint
  const NodeFacts evicting = Facts(Json::object(), {{{"key", "gone"}, {"effect", "NoExecute"}}});
  EXPECT_EQ(NodeMismatch(Read(Json::object()), evicting), "taint gone:NoExecute not tolerated");
}

TEST(NodeFit, NamesTheMalformedField) {
  auto error = [](const Json& spec) {
    StatusOr<NodeConstraints> c = ReadNodeConstraints(spec);
    return c.ok() ? std::string("accepted") : c.status().message();
  };
  EXPECT_EQ(error({{"affinity",
                    Affinity({{{"matchExpressions",
                                {{{"key", "zone"}, {"operator", "Near"}, {"values", {"x"}}}}}}})}}),
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
            "nodeSelectorTerms[0].matchExpressions[0].operator: 'Near' is not In, NotIn, Exists, "
            "DoesNotExist, Gt or Lt");
  EXPECT_EQ(
      error({{"affinity",
              Affinity({{{"matchExpressions",
                          {{{"key", "gen"}, {"operator", "Gt"}, {"values", {"8", "9"}}}}}}})}}),
      "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
      "nodeSelectorTerms[0].matchExpressions[0].values: Gt takes one whole number");
  EXPECT_EQ(error({{"nodeSelector", {{"zone", 1}}}}), "spec.nodeSelector[zone]: 1 is not a string");
  EXPECT_EQ(error({{"tolerations", {{{"value", "x"}}}}}),
            "spec.tolerations[0].key: an Equal toleration names its key");
  EXPECT_EQ(error({{"tolerations", {{{"key", "a"}, {"operator", "Maybe"}}}}}),
            "spec.tolerations[0].operator: 'Maybe' is not Equal or Exists");
  EXPECT_EQ(
      error({{"affinity",
              Affinity({{{"matchFields",
                          {{{"key", "metadata.uid"}, {"operator", "In"}, {"values", {"x"}}}}}}})}}),
      "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
      "nodeSelectorTerms[0].matchFields[0]: a field requirement is metadata.name with In or "
      "NotIn");
}

}  // namespace
}  // namespace paladin::k8s
