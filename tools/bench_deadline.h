// The benches that wait for other ranks (`joule bench train`, `joule bench comm`) bound each wait by their
// --collective-timeout: a CollectiveTimeout from their measurement comes back with a "what to do" naming that flag.
#pragma once

#include <string>

#include "collectives/communicator.h"

namespace joule::tools {

// measure(), its CollectiveTimeout rethrown with the flag's hint; `slow_work`: what may legitimately take that long.
template <class Measure>
auto naming_the_timeout_flag(Measure&& measure, const std::string& slow_work) {
  try {
    return measure();
  } catch (const collectives::CollectiveTimeout& e) {
    throw collectives::CollectiveTimeout(e.what(),
                                         "another rank died or stalled (look for its error above); raise "
                                         "--collective-timeout only if " +
                                             slow_work + " are legitimately that slow");
  }
}

}  // namespace joule::tools
