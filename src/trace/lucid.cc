#include "paladin/trace/lucid.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "paladin/trace/csv.h"

namespace paladin::trace {
namespace {

StatusOr<std::string> KeyAt(const CsvTable& t, size_t r, const std::string& suffix) {
  std::string key;
  for (const char* c : {"model", "dataset", "batchsize", "amp"}) {
    auto col = t.Column(std::string(c) + suffix);
    if (!col.ok()) return col.status();
    key += (key.empty() ? "" : "/") + t.Cell(r, *col);
  }
  return key;
}

}  // namespace

StatusOr<LucidProfiles> ReadLucidProfiles(const std::string& dir) {
  const std::string single_path = dir + "/single_data.csv";
  auto single_text = ReadWholeFile(single_path);
  if (!single_text.ok()) return single_text.status();
  auto single = CsvTable::Parse(*single_text, single_path);
  if (!single.ok()) return single.status();
  LucidProfiles out;
  std::map<std::string, int32_t> index;
  auto c_label = single->Column("label");
  if (!c_label.ok()) return c_label.status();
  for (size_t r = 0; r < single->rows(); ++r) {
    auto key = KeyAt(*single, r, "");
    if (!key.ok()) return key.status();
    auto label = single->Int(r, *c_label, 0, 2);
    if (!label.ok()) return label.status();
    if (index.emplace(*key, static_cast<int32_t>(out.names.size())).second) {
      out.names.push_back(*key);
      out.interference.label.push_back(static_cast<int8_t>(*label));
    }
  }
  if (out.names.empty()) return InvalidArgument(single_path + ": no profiles");
  const auto n = static_cast<int32_t>(out.names.size());

  const std::string pair_path = dir + "/colocate_info.csv";
  auto pair_text = ReadWholeFile(pair_path);
  if (!pair_text.ok()) return pair_text.status();
  auto pairs = CsvTable::Parse(*pair_text, pair_path);
  if (!pairs.ok()) return pairs.status();
  auto c1 = pairs->Column("speed1");
  if (!c1.ok()) return c1.status();
  auto c2 = pairs->Column("speed2");
  if (!c2.ok()) return c2.status();
  std::vector<double> sum(static_cast<size_t>(n) * n, 0.0);
  std::vector<int> count(sum.size(), 0);
  std::vector<double> all;
  for (size_t r = 0; r < pairs->rows(); ++r) {
    auto k1 = KeyAt(*pairs, r, "1");
    if (!k1.ok()) return k1.status();
    auto k2 = KeyAt(*pairs, r, "2");
    if (!k2.ok()) return k2.status();
    auto s1 = pairs->Double(r, *c1, 0.01, 10);
    if (!s1.ok()) return s1.status();
    auto s2 = pairs->Double(r, *c2, 0.01, 10);
    if (!s2.ok()) return s2.status();
    const auto a = index.find(*k1), b = index.find(*k2);
    if (a == index.end() || b == index.end()) continue;  // a pair of a job never profiled alone
    const auto un = static_cast<size_t>(n);
    const size_t ab = static_cast<size_t>(a->second) * un + static_cast<size_t>(b->second);
    const size_t ba = static_cast<size_t>(b->second) * un + static_cast<size_t>(a->second);
    sum[ab] += *s1, ++count[ab];
    sum[ba] += *s2, ++count[ba];
    all.push_back(*s1), all.push_back(*s2);
    ++out.pairs;
  }
  if (all.empty()) return InvalidArgument(pair_path + ": no pair matches a profile");
  out.interference.profiles = n;
  out.interference.pair_speed.assign(sum.size(), std::nan(""));
  for (size_t i = 0; i < sum.size(); ++i) {
    if (count[i] > 0) out.interference.pair_speed[i] = sum[i] / count[i];
  }
  std::sort(all.begin(), all.end());
  const size_t m = all.size();
  out.interference.unmeasured_speed = m % 2 == 1 ? all[m / 2] : (all[m / 2 - 1] + all[m / 2]) / 2;
  return out;
}

}  // namespace paladin::trace
