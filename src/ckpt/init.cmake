# paladin-workload-init (src/ckpt/workload_init.cc): the root-owned pid 1 of a job that runs as
# an unprivileged user, so that CRIU can dump it (docs/ckpt.md). ckpt::StartWorkload looks for it
# with ckpt::FindWorkloadInit ($PALADIN_WORKLOAD_INIT, $PALADIN_LIB_DIR, next to the running
# program, ../lib/paladin). It is dumped by CRIU with every job it leads: plain flags, no
# sanitizers, nothing of Paladin's linked.
if(NOT TARGET paladin-workload-init)
  add_executable(paladin-workload-init ${PROJECT_SOURCE_DIR}/src/ckpt/workload_init.cc
                                       ${PROJECT_SOURCE_DIR}/src/ckpt/init_fence.cc)
  target_compile_options(paladin-workload-init PRIVATE -O2)
  # Header-only parts of Paladin (include/paladin/ckpt/fence.h); nothing is linked.
  target_include_directories(paladin-workload-init PRIVATE ${PROJECT_SOURCE_DIR}/include)
  set_target_properties(paladin-workload-init PROPERTIES
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
  if(TARGET paladin)
    add_dependencies(paladin paladin-workload-init)
  endif()
  install(TARGETS paladin-workload-init RUNTIME DESTINATION lib/paladin)
endif()

# libpaladin-criu-rlimit.so (src/ckpt/criu_rlimit.cc): preloaded into CRIU where this process
# lacks CAP_SYS_RESOURCE, so that CRIU can read the resource limits of a job that runs as another
# user (ckpt::Criu::Env, docs/ckpt.md). Found like the interposers ($PALADIN_LIB_DIR, next to the
# running program, ../lib/paladin). Loaded into CRIU: plain flags, no sanitizers, no exceptions.
if(NOT TARGET paladin-criu-rlimit)
  add_library(paladin-criu-rlimit MODULE ${PROJECT_SOURCE_DIR}/src/ckpt/criu_rlimit.cc)
  target_compile_options(paladin-criu-rlimit PRIVATE -O2 -fno-exceptions)
  target_link_libraries(paladin-criu-rlimit PRIVATE ${CMAKE_DL_LIBS})
  target_link_options(paladin-criu-rlimit PRIVATE -Wl,--as-needed)
  set_target_properties(paladin-criu-rlimit PROPERTIES
    PREFIX "lib" LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
  if(TARGET paladin)
    add_dependencies(paladin paladin-criu-rlimit)
  endif()
  install(TARGETS paladin-criu-rlimit LIBRARY DESTINATION lib/paladin)
endif()

# paladin-gpu-call (src/ckpt/gpu_call.cc): one call of the CUDA driver's checkpoint API in a
# program of its own, which ckpt::GpuCheckpointer starts for every call and kills past its time
# limit (a fork of the multithreaded agent could hang on a lock it inherited). Found like
# paladin-workload-init ($PALADIN_GPU_CALL, $PALADIN_LIB_DIR, next to the running program,
# ../lib/paladin). It loads the emulated driver, which has no sanitizers: neither has it.
if(NOT TARGET paladin-gpu-call)
  add_executable(paladin-gpu-call ${PROJECT_SOURCE_DIR}/src/ckpt/gpu_call.cc)
  target_compile_options(paladin-gpu-call PRIVATE -O2)
  target_include_directories(paladin-gpu-call PRIVATE ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(paladin-gpu-call PRIVATE ${CMAKE_DL_LIBS})
  set_target_properties(paladin-gpu-call PROPERTIES
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
  if(TARGET paladin)
    add_dependencies(paladin paladin-gpu-call)
  endif()
  install(TARGETS paladin-gpu-call RUNTIME DESTINATION lib/paladin)
endif()
