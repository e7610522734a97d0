// A job in which rank 1 stalls before an all_reduce: rank 0's collective times out and aborts the
// whole job, as joule's main does with any collective error. Driven by expect_abort.sh.
#include <chrono>
#include <iostream>
#include <thread>
#include <vector>

#include "collectives/communicator.h"

int main() {
  using namespace joule::collectives;
  auto comm = create_communicator("mpi");
  std::vector<float> v(1024, 1.0f);
  CollectiveOptions o;
  o.label = "gradient bucket 0 of 1";
  o.timeout_seconds = 2;
  if (comm->info().rank == 1) std::this_thread::sleep_for(std::chrono::seconds(120));
  try {
    comm->all_reduce({v.data(), v.size(), DType::kFloat32}, o)->wait();
  } catch (const CollectiveError& e) {
    comm->abort(e.what(), 3);
  }
  std::cout << "stall probe: the collective finished, which it must not" << std::endl;
  return 0;
}
