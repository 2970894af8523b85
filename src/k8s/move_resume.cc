// A move stopped midway settled from what it left (ResumeMove), and a finished move's images
// removed (RemoveMoveImages): both find the move's image folders by their owner file.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "node_ops.h"
#include "paladin/ckpt/gpu_checkpoint.h"
#include "paladin/k8s/move.h"
#include "paladin/k8s/placement_pass.h"

namespace paladin::k8s {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using detail::FinishFromImage;
using detail::kCheckpointedMark;
using detail::MoveGpuUuids;
using detail::ReadKey;
using detail::Runc;

namespace {

// The move image folders ("move-...") in `folder` whose owner file starts with `owner_prefix`
// (the move's namespace, replacement and pod: WriteOwner's lines), by name.
std::vector<std::string> MoveImagesOwnedBy(const std::string& folder,
                                           const std::string& owner_prefix) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(folder, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory(ec) || name.rfind("move-", 0) != 0) continue;
    std::ifstream in(e.path() / "owner");
    const std::string owner((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (owner.rfind(owner_prefix, 0) == 0) names.push_back(name);
  }
  return names;
}

}  // namespace

StatusOr<Resumed> ResumeMove(const ApiClient& client, const MoveOptions& o,
                             const std::function<void(const std::string&)>& progress,
                             bool* whole_image) {
  if (whole_image != nullptr) *whole_image = false;
  const std::string who = "pod " + o.ns + "/" + o.pod;
  StatusOr<std::string> body = client.Get("/api/v1/namespaces/" + o.ns + "/pods/" + o.pod);
  if (!body.ok()) return body.status();
  StatusOr<MovablePod> pod = ReadMovablePod(*body, /*running=*/false);
  if (!pod.ok()) return pod.status();
  Resumed out;
  MoveResult& result = out.result;
  result.new_name = o.new_name.empty() ? NextPodName(o.pod) : o.new_name;
  result.from_node = pod->node;
  result.from_gpu = pod->gpu;
  MoveOptions target = o;
  if (target.node.empty()) target.node = pod->node;
  const bool between_nodes = target.node != pod->node;
  if (!between_nodes) target.to_images.clear();
  result.to_node = target.node;

  // The move's image folders (the owner file names the replacement and the pod, by uid): in
  // this node's folder, or carried whole into the destination's.
  const std::string owner_of_move = "namespace " + o.ns + "\npod " + result.new_name + "\nfrom " +
                                    o.ns + "/" + o.pod + " " + pod->uid + "\n";
  struct Found {
    std::string folder, name;
    bool whole = false;
  };
  std::vector<Found> found;
  std::error_code ec;
  for (const std::string& folder : {o.images, target.to_images}) {
    if (folder.empty()) continue;
    for (const std::string& name : MoveImagesOwnedBy(folder, owner_of_move)) {
      if (name.find(".partial") != std::string::npos) continue;
      found.push_back({folder, name, fs::exists(fs::path(folder) / name / kCheckpointedMark, ec)});
    }
  }

  // Whether the pod's container runs: runc, on this node, says.
  const Runc runc{o, o.runc_root};
  bool runs = false;
  std::string sandbox, bundle;
  if (!pod->container_id.empty()) {
    StatusOr<Json> state = runc.State(pod->container_id);
    if (state.ok()) {
      runs = Str(*state, "status") == "running";
      sandbox = Str(state->value("annotations", Json::object()), "io.kubernetes.cri.sandbox-id");
      bundle = Str(*state, "bundle");
    }
  }
  if (runs) {
    // Stopped before the checkpoint was whole: the pod goes on where it was. What the move had
    // done is undone: a GPU state locked or checkpointed is given back, the mark that keeps the
    // container from starting again and the move's image are removed.
    if (pod->gpu >= 0) {
      if (!bundle.empty())
        (void)detail::ReadBundle(bundle);  // a GPU state given back joins the pod's
      StatusOr<std::unique_ptr<ckpt::GpuCheckpointer>> driver =
          ckpt::GpuCheckpointer::Load(o.driver);
      StatusOr<std::vector<pid_t>> pids = runc.Pids(pod->container_id);
      if (driver.ok() && pids.ok()) {
        for (pid_t p : (*driver)->CudaProcesses(*pids)) {
          StatusOr<CUprocessState> st = (*driver)->State(p);
          if (!st.ok() || *st == CU_PROCESS_STATE_RUNNING) continue;
          progress("giving back the GPU state of pid " + std::to_string(p));
          if (*st == CU_PROCESS_STATE_CHECKPOINTED) (void)(*driver)->Restore(p, {});
          (void)(*driver)->Unlock(p);
        }
      }
    }
    if (!sandbox.empty()) fs::remove(o.images + "/moved/" + sandbox, ec);
    for (const Found& f : found) fs::remove_all(f.folder + "/" + f.name, ec);
    out.kind = Resumed::Kind::kUndone;
    out.message = "its mover was stopped before the replacement was made: " + who +
                  " runs where it was and nothing moved (ask again)";
    return out;
  }
  const Found* whole = nullptr;
  for (const Found& f : found) {
    if (f.whole && (whole == nullptr || f.folder == target.to_images)) whole = &f;
  }
  if (whole == nullptr) {
    return FailedPrecondition(
        who + "'s container does not run and no whole checkpoint image of the move is in " +
        o.images + (target.to_images.empty() ? "" : " or " + target.to_images) +
        " (its mover was stopped during the checkpoint): nothing to finish the move from");
  }
  result.image = whole->name;
  if (whole_image != nullptr) *whole_image = true;
  progress("finishing the move of " + who + " from its checkpoint image " + whole->folder + "/" +
           whole->name + " (its mover was stopped after the checkpoint)");
  std::vector<std::string> uuids;
  if (pod->gpu >= 0) {
    if (target.gpu < 0) {
      StatusOr<std::unique_ptr<ReplacementPlacer>> placer =
          ReplacementPlacer::Create(client, o.placement, between_nodes ? "" : pod->uid);
      if (!placer.ok()) return placer.status();
      const PodOutcome where = (*placer)->Place(*body, target.node, -1);
      if (!where.placed) {
        return FailedPrecondition(who + "'s replacement has no place on node " + target.node +
                                  ": " + where.reason + " (the checkpoint image is kept)");
      }
      progress("GPU chosen: " + where.how);
      target.gpu = where.gpu;
    }
    StatusOr<std::vector<std::string>> got = MoveGpuUuids(o, *pod, target);
    if (!got.ok()) return got.status();
    uuids = *got;
  }
  result.to_gpu = target.gpu;
  StatusOr<std::string> key = ReadKey(o.key_file);
  if (!key.ok()) return key.status();
  // The pod has been paused since its checkpoint ended.
  Clock::time_point t0 = Clock::now();
  const auto written =
      fs::last_write_time(fs::path(whole->folder) / whole->name / kCheckpointedMark, ec);
  if (!ec) {
    t0 -= std::chrono::duration_cast<Clock::duration>(fs::file_time_type::clock::now() - written);
  }
  if (Status s = FinishFromImage(client, o, *body, *pod, target, *key, uuids, nullptr, t0, &result,
                                 progress);
      !s.ok()) {
    return s;
  }
  out.kind = Resumed::Kind::kFinished;
  out.message = "finished from its checkpoint image " + result.image;
  return out;
}

int RemoveMoveImages(const std::string& images, const std::string& ns, const std::string& pod,
                     const std::string& new_name) {
  const std::string owner_of_move =
      "namespace " + ns + "\npod " + new_name + "\nfrom " + ns + "/" + pod + " ";
  int removed = 0;
  for (const std::string& name : MoveImagesOwnedBy(images, owner_of_move)) {
    std::error_code rm;
    fs::remove_all(fs::path(images) / name, rm);
    if (!rm) ++removed;
  }
  return removed;
}

}  // namespace paladin::k8s
