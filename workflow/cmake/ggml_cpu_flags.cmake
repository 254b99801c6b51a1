# Included right after project(ggml) (CMAKE_PROJECT_ggml_INCLUDE). Adds LADDER_GGML_CPU_FLAGS to
# the CPU backend's own code only: the ggml-cpu target, after ggml's own ARCH_FLAGS (so e.g.
# -mno-amx-tile beats -march=native), and the vendor kernel library ggml-cpu builds for itself
# (KleidiAI's `kleidiai` target, from FetchContent), leaving every other target's command line,
# and its ccache entries, untouched. Deferred to the end of ggml's directory, when both exist.
if(LADDER_GGML_CPU_FLAGS)
  separate_arguments(_ladder_cpu_flags UNIX_COMMAND "${LADDER_GGML_CPU_FLAGS}")
  function(_ladder_apply_cpu_flags)
    foreach(_ladder_target IN ITEMS ggml-cpu kleidiai)
      if(TARGET ${_ladder_target})
        target_compile_options(${_ladder_target} PRIVATE ${_ladder_cpu_flags})
        message(STATUS "ladder: ${_ladder_target} extra flags: ${LADDER_GGML_CPU_FLAGS}")
      endif()
    endforeach()
  endfunction()
  cmake_language(DEFER CALL _ladder_apply_cpu_flags)
endif()
