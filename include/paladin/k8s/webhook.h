// Paladin's mutating admission webhook (docs/kubernetes.md): a pod that asks for
// paladin.io/gpu-memory gets Paladin as its scheduler and Paladin's interposer injected, with
// nothing changed in its image. The interposer and the driver behind it come from a hostPath
// folder that `paladin k8s node --lib-dir` prepares on each node; the environment is the one
// `paladin run` gives a workload (docs/quota.md): LD_PRELOAD and LD_LIBRARY_PATH naming that
// folder, PALADIN_GPU_MEM the container's own request in bytes (a quota region private to the
// container's process, so no other pod can write it), CUDA_VISIBLE_DEVICES from the GPU the
// scheduler chose (the pod's paladin.io/gpu annotation, through the downward API), and for the
// emulated GPU PALADIN_EMU_GPUS and PALADIN_EMU_STATE (a state file shared by the node's pods, as
// one physical GPU is).
//
// Paladin's own annotations on a pod (paladin.io/gpu, gpu-memory-bytes, restore-from, ... every
// paladin.io/ key but paladin.io/priority and paladin.io/gpu-memory: auto) decide its GPU, its
// quota and what it restores: only Paladin's scheduler (through pods/binding, which no webhook
// sees), its mover (creating a move's replacement) and the webhook itself write them. The webhook,
// registered for CREATE and UPDATE, refuses anyone else who adds, changes or removes one, and a GPU
// pod that names its own node.
//
// `paladin.io/gpu-memory: auto` (docs/kubernetes.md, design 7): a created pod with that
// annotation gets its first container's resources.limits (and requests) [paladin.io/gpu-memory]
// written by the webhook, sized by Paladin's server from the history of its class (its
// namespace's team, PodClassCommand), else a default, and the annotation
// paladin.io/gpu-memory-sized (only Paladin sets it) saying the size and how it was chosen.
//
// Thread safety: Review has no state of its own (InjectOptions::size_auto must be callable from
// several threads); the server answers from several threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "paladin/api/client.h"
#include "paladin/base/status.h"
#include "paladin/k8s/api.h"

namespace paladin::k8s {

inline constexpr char kGpuSizedAnnotation[] = "paladin.io/gpu-memory-sized";  // how, for auto
inline constexpr char kAutoSize[] = "auto";  // the only value of annotation paladin.io/gpu-memory

// What Paladin's server answers for an `auto` pod's class.
struct AutoSizing {
  uint64_t bytes = 0;
  std::string why;  // "paladin server, research/train: highest peak of ..."
};
// Sizes an `auto` pod of namespace `ns` whose class command is `command`; an error when the
// answer cannot be had (the webhook then uses its default and says why).
using AutoSizer =
    std::function<StatusOr<AutoSizing>(const std::string& ns, const std::string& command)>;

struct InjectOptions {
  std::string scheduler_name = "paladin";
  std::string lib_dir;                               // on the node (hostPath)
  std::string lib_mount = "/run/paladin/lib";        // in the container
  std::string emulated_gpus;                         // PALADIN_EMU_GPUS; empty: a real driver
  std::string emu_state_dir;                         // on the node (hostPath), emulated only
  std::string emu_state_mount = "/run/paladin/emu";  // in the container
  // The API server's names (AdmissionReview userInfo.username) of Paladin's own identities, its
  // scheduler's and mover's (e.g. system:serviceaccount:paladin:paladin): only they may write
  // Paladin's own annotations. Empty: nobody may.
  std::vector<std::string> paladin_users;
  // The names of the nodes' measuring identity (paladin k8s node --usage): of Paladin's own
  // annotations they may write paladin.io/gpu-memory-used only.
  std::vector<std::string> usage_users;
  // `auto` pods: sized by this (ServerSizer), else (empty, or it fails) auto_default_bytes.
  AutoSizer size_auto;
  uint64_t auto_default_bytes = uint64_t{4} << 30;  // core::kAutoDefaultBytes
};

// The AutoSizer that asks Paladin's server (GET /v1/sizing?team=&command=) with `token` (an
// admin's: the webhook sizes every team's pods) within `timeout_s`, the team being the
// namespace's (TeamOfNamespace, its labels read through `kube`; without `kube`, the namespace's
// own team k8s-NAMESPACE).
AutoSizer ServerSizer(std::shared_ptr<const ApiClient> kube, const api::Endpoint& server,
                      const std::string& token, double timeout_s);

// Whether a pod annotation is Paladin's own (paladin.io/ and not one a user may set: the user's
// are paladin.io/priority and paladin.io/gpu-memory, whose only value is `auto`).
bool PaladinOnlyAnnotation(std::string_view key);

// Refuses a pod whose Paladin-only annotations other than those in `may_change` differ from
// `old_pod_json`'s (empty for a pod being created: then any of them is refused), naming the first
// annotation added, changed or removed.
Status CheckPaladinAnnotations(const std::string& old_pod_json, const std::string& pod_json,
                               const std::set<std::string>& may_change = {});

// The JSON Patch (RFC 6902) for a pod, or "" when the pod asks for no paladin.io/gpu-memory
// (then it is left exactly as it is). An `auto` pod is sized first (options.size_auto); one that
// also asks a size in a container's limits is refused naming both fields. An error names the field
// that is malformed, or spec.nodeName for a GPU pod that names its node, or spec.schedulerName for
// one that names a scheduler other than the default or Paladin's (Paladin's scheduler places GPU
// pods).
StatusOr<std::string> PodPatch(const std::string& pod_json, const InjectOptions& options);

// An AdmissionReview (admission.k8s.io/v1) request in, the response out. A pod with a malformed
// field is refused with a message naming it, and so is one whose Paladin-only annotations a user
// other than options.paladin_users sets or changes (CREATE and UPDATE; options.usage_users may
// change paladin.io/gpu-memory-used only); a created GPU pod gets
// PodPatch's patch, an updated one none. Anything that is not a pod is allowed unchanged.
std::string Review(const std::string& review_json, const InjectOptions& options);

// Serves Review at POST /mutate over HTTPS on `listen` (HOST:PORT) until stopped by a signal.
Status ServeWebhook(const std::string& listen, const std::string& cert_file,
                    const std::string& key_file, const InjectOptions& options);

}  // namespace paladin::k8s
