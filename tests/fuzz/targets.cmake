# The fuzz targets and what each links: only the library of the reader under test, so the
# sanitized clang build compiles no more than it fuzzes. Included by tests/fuzz/CMakeLists.txt
# (libFuzzer) and tests/CMakeLists.txt (the g++ replay of the corpus in the normal suite).
set(COLLAGE_FUZZ_TARGETS indexed_dataset gpt_dataset config checkpoint gpt2_tokenizer
                         gpt2_tokenizer_files document_reader wordpiece_tokenizer bert_hdf5)
function(collage_fuzz_link executable target)
  if(target STREQUAL "config")
    target_link_libraries(${executable} PRIVATE collage_config)
  elseif(target STREQUAL "checkpoint" AND COLLAGE_FUZZ)
    # checkpoint.cpp and the file helpers it reads with: the rest of src/checkpoint pulls in
    # every backend.
    target_sources(${executable} PRIVATE ${CMAKE_SOURCE_DIR}/src/checkpoint/checkpoint.cpp
                                         ${CMAKE_SOURCE_DIR}/src/checkpoint/posix_file.cpp)
    target_link_libraries(${executable} PRIVATE collage_core)
  elseif(target STREQUAL "checkpoint")  # the suite's replay: the library the suite builds anyway
    target_link_libraries(${executable} PRIVATE collage_checkpoint)
  else()
    target_link_libraries(${executable} PRIVATE collage_data)
  endif()
  target_include_directories(${executable} PRIVATE ${CMAKE_SOURCE_DIR}/src)
  target_compile_definitions(${executable} PRIVATE COLLAGE_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
endfunction()
