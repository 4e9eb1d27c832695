# Debian's CAF 0.17 ships no CMake config: find it and wrap it as imported
# targets (used by the build and by the installed specdConfig.cmake).
if(NOT TARGET specd::caf_core)
  find_package(Threads REQUIRED)
  find_path(CAF_INCLUDE_DIR caf/all.hpp REQUIRED)
  find_library(CAF_CORE_LIBRARY caf_core REQUIRED)
  find_library(CAF_IO_LIBRARY caf_io REQUIRED)
  add_library(specd::caf_core UNKNOWN IMPORTED)
  set_target_properties(specd::caf_core PROPERTIES IMPORTED_LOCATION ${CAF_CORE_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${CAF_INCLUDE_DIR} INTERFACE_LINK_LIBRARIES Threads::Threads)
  add_library(specd::caf_io UNKNOWN IMPORTED)
  set_target_properties(specd::caf_io PROPERTIES IMPORTED_LOCATION ${CAF_IO_LIBRARY}
    INTERFACE_LINK_LIBRARIES specd::caf_core)
endif()
