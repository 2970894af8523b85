# paladin-workload-init (src/ckpt/workload_init.cc): the root-owned pid 1 of a job that runs as
# an unprivileged user, so that CRIU can dump it (docs/ckpt.md). ckpt::StartWorkload looks for it
# next to the running program, then in ../lib/paladin ($PALADIN_WORKLOAD_INIT overrides). It is
# dumped by CRIU with every job it leads: plain flags, no sanitizers, nothing of Paladin's linked.
if(NOT TARGET paladin-workload-init)
  add_executable(paladin-workload-init ${PROJECT_SOURCE_DIR}/src/ckpt/workload_init.cc)
  target_compile_options(paladin-workload-init PRIVATE -O2)
  set_target_properties(paladin-workload-init PROPERTIES
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
  if(TARGET paladin)
    add_dependencies(paladin paladin-workload-init)
  endif()
  install(TARGETS paladin-workload-init RUNTIME DESTINATION lib/paladin)
endif()
