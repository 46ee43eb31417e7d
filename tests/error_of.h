#pragma once
// error_of(f): the message of the collage::Error that f throws, for tests that check what an
// error says. Shared by the test areas (data, train) that each had a copy.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace collage::test {

// The message of the collage::Error `f` throws ("" and a test failure if it throws none; any
// other exception escapes and fails the test).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no collage::Error thrown";
  return "";
}

}  // namespace collage::test
