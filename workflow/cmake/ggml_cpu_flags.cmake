# Included right after project(ggml) (CMAKE_PROJECT_ggml_INCLUDE). Adds LADDER_GGML_CPU_FLAGS to
# the ggml-cpu target only, after ggml's own ARCH_FLAGS (so e.g. -mno-amx-tile beats
# -march=native), leaving every other target's command line, and its ccache entries, untouched.
if(LADDER_GGML_CPU_FLAGS)
  separate_arguments(_ladder_cpu_flags UNIX_COMMAND "${LADDER_GGML_CPU_FLAGS}")
  cmake_language(DEFER CALL target_compile_options ggml-cpu PRIVATE ${_ladder_cpu_flags})
  message(STATUS "ladder: ggml-cpu extra flags: ${LADDER_GGML_CPU_FLAGS}")
endif()
