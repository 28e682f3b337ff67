# pipeline/, fixture/ and the shardq binary with what only they need (MPI, HDF5, spdlog,
# CLI11, toml++, mimalloc); included by the top-level CMakeLists.txt when SHARDQ_PIPELINE.
find_package(MPI REQUIRED COMPONENTS C)
# HDF5 linked statically: the shared library pulls libcurl (its read-only S3 driver, which
# shardq never uses) and with it ~30 more libraries (TLS, Kerberos, LDAP, ...) that every
# process start maps and relocates: 12.9 -> 7.1 ms for `shardq --help` (docs/benchmarks.md).
# The static archive brings only the objects referenced, none of which needs curl; were one
# ever to, the link fails on the missing symbols rather than anything going quiet.
set(HDF5_USE_STATIC_LIBRARIES ON)
find_package(HDF5 REQUIRED COMPONENTS C)
list(FILTER HDF5_C_LIBRARIES EXCLUDE REGEX "/lib(curl|crypto)\\.so$")
# Natively the list above comes from HDF5's compiler wrapper (h5cc), which names what the
# archive needs; a cross build has no wrapper to ask and finds the archive alone: add its
# filters' libraries (deflate, szip) as the wrapper would.
if(CMAKE_CROSSCOMPILING)
  find_library(HDF5_ZLIB_LIBRARY z REQUIRED)
  find_library(HDF5_SZIP_LIBRARY sz REQUIRED)
  list(APPEND HDF5_C_LIBRARIES ${HDF5_ZLIB_LIBRARY} ${HDF5_SZIP_LIBRARY} ${CMAKE_DL_LIBS} m)
endif()
find_package(spdlog REQUIRED)
find_package(CLI11 REQUIRED)
find_package(tomlplusplus REQUIRED)

# pipeline/: files, ranks, time, checkpoints.
file(GLOB SHARDQ_PIPELINE_SOURCES CONFIGURE_DEPENDS pipeline/*.cpp pipeline/io/*.cpp)
list(REMOVE_ITEM SHARDQ_PIPELINE_SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/pipeline/main.cpp)
add_library(shardq_pipeline STATIC ${SHARDQ_PIPELINE_SOURCES})
target_include_directories(shardq_pipeline PUBLIC ${HDF5_INCLUDE_DIRS})
# The C API only: Open MPI's deprecated C++ bindings would need libmpi_cxx.
target_compile_definitions(shardq_pipeline PUBLIC SHARDQ_VERSION="${PROJECT_VERSION}" OMPI_SKIP_MPICXX MPICH_SKIP_MPICXX)
target_link_libraries(shardq_pipeline PUBLIC shardq_stages MPI::MPI_C ${HDF5_C_LIBRARIES}
  spdlog::spdlog fmt::fmt CLI11::CLI11 nlohmann_json::nlohmann_json tomlplusplus::tomlplusplus
  xxhash::xxhash Threads::Threads PRIVATE shardq_warnings)

# fixture/: the miniature checkpoints for tests, demos and benchmarks (with the model's
# LICENSE text and tokenizer), linked by the CLI and the tests, never by the engine.
file(GLOB SHARDQ_FIXTURE_SOURCES CONFIGURE_DEPENDS fixture/*.cpp)
add_library(shardq_fixture STATIC ${SHARDQ_FIXTURE_SOURCES})
target_link_libraries(shardq_fixture PUBLIC shardq_pipeline PRIVATE shardq_warnings)

add_executable(shardq pipeline/main.cpp)
target_link_libraries(shardq PRIVATE shardq_pipeline shardq_fixture shardq_warnings)
# The shardq binary allocates through mimalloc: a plan of 100K tensors makes millions of
# small allocations (names, shapes, shard entries), and glibc's malloc and free took ~25% of
# such a job's CPU (docs/benchmarks.md, int8_many). Linked first and kept (--no-as-needed) so
# that it interposes malloc and free. Not under the sanitizers, which bring their own.
option(SHARDQ_MIMALLOC "allocate through mimalloc in the shardq binary" ON)
if(SHARDQ_MIMALLOC AND NOT CMAKE_CXX_FLAGS MATCHES "sanitize")
  find_package(mimalloc 2 REQUIRED)
  target_link_options(shardq PRIVATE "LINKER:--no-as-needed")
  target_link_libraries(shardq PRIVATE mimalloc)
  # A run's heap taken ahead of use and populated on a helper thread (RunArgs::reserve_heap).
  target_sources(shardq PRIVATE pipeline/heap/mimalloc_reserve.cpp)
  target_compile_definitions(shardq PRIVATE SHARDQ_MIMALLOC)
endif()
