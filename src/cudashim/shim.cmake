# --- cudashim: the GPU-memory quota interposer (libpaladin-cuda.so, libpaladin-nvml.so) ---
# Loaded into workloads: no sanitizers, no exceptions, hidden symbols except the C API, the C++
# standard library linked in statically. See docs/quota.md for how the launcher wires it up.
set(PALADIN_PRELOAD_FLAGS -fno-exceptions -fvisibility=hidden -fvisibility-inlines-hidden)
set(PALADIN_PRELOAD_LINK -static-libstdc++ -static-libgcc -Wl,--exclude-libs,ALL -Wl,--no-as-needed
    -Wl,--version-script=${CMAKE_CURRENT_SOURCE_DIR}/src/cudashim/exports.map)

add_library(paladin_quota_pic STATIC src/quota/region.cc)
target_include_directories(paladin_quota_pic PUBLIC include)
target_compile_options(paladin_quota_pic PRIVATE ${PALADIN_PRELOAD_FLAGS})
set_target_properties(paladin_quota_pic PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_link_libraries(paladin_quota_pic PUBLIC paladin_base)

# Stand-ins that give the interposers their DT_NEEDED entries. At run time the launcher's library
# directory resolves these names to the real (or emulated) driver and NVML.
foreach(next cuda nvml)
  add_library(paladin-${next}-next SHARED src/cudashim/next_stub.cc)
  set_target_properties(paladin-${next}-next PROPERTIES SOVERSION 1
    LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/stub)
endforeach()

add_library(paladin-cuda SHARED src/cudashim/shim.cc src/cudashim/memory_hooks.cc
            src/cudashim/context_hooks.cc src/cudashim/proc_address.cc)
target_link_libraries(paladin-cuda PRIVATE paladin_quota_pic paladin-cuda-next
                                           ${CMAKE_DL_LIBS} Threads::Threads)
target_compile_options(paladin-cuda PRIVATE ${PALADIN_PRELOAD_FLAGS})
target_link_options(paladin-cuda PRIVATE ${PALADIN_PRELOAD_LINK} -Wl,-soname,libcuda.so.1)
set_target_properties(paladin-cuda PROPERTIES NO_SONAME ON SKIP_BUILD_RPATH ON)

add_library(paladin-nvml SHARED src/cudashim/nvml_hooks.cc)
target_link_libraries(paladin-nvml PRIVATE paladin_quota_pic paladin-nvml-next ${CMAKE_DL_LIBS}
                                           Threads::Threads)
target_compile_options(paladin-nvml PRIVATE ${PALADIN_PRELOAD_FLAGS})
target_link_options(paladin-nvml PRIVATE ${PALADIN_PRELOAD_LINK} -Wl,-soname,libnvidia-ml.so.1)
set_target_properties(paladin-nvml PROPERTIES NO_SONAME ON SKIP_BUILD_RPATH ON)

install(TARGETS paladin-cuda paladin-nvml LIBRARY DESTINATION lib/paladin)
