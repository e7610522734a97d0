// Owned HDF5 handles and the H5_CHECK macro. Every hid_t joule opens lives in an Hdf5Handle, which
// closes it with the right H5*close for its kind.
#pragma once

#include <hdf5.h>

#include <stdexcept>
#include <string>
#include <utility>

#include "launch/util/error.h"

namespace joule::data {

class Hdf5Error : public joule::Error {
 public:
  explicit Hdf5Error(const std::string& message, std::string hint =
                                                     "check the shard with `joule data inspect FILE`, regenerate it "
                                                     "with `joule data create`, or leave it out of data.train")
      : joule::Error(message, std::move(hint)) {}
};

class Hdf5Handle {
 public:
  Hdf5Handle() = default;
  explicit Hdf5Handle(hid_t id) : id_(id) {}
  Hdf5Handle(const Hdf5Handle&) = delete;
  Hdf5Handle& operator=(const Hdf5Handle&) = delete;
  Hdf5Handle(Hdf5Handle&& o) noexcept : id_(o.id_) { o.id_ = H5I_INVALID_HID; }
  Hdf5Handle& operator=(Hdf5Handle&& o) noexcept;
  ~Hdf5Handle() { reset(); }

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset();  // closes by kind (file, group, dataset, dataspace, datatype, property list, attribute)

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// "HDF5 1.10.8"
std::string hdf5_version();

// HDF5's own account of the failure that just happened, taken from its error stack (which is then cleared): the
// operating system's error where HDF5 recorded one (errno 28: "No space left on device"), else the innermost
// message. Thrown as Hdf5Error naming `what` and the call; a failure with an operating-system error gets the advice
// for that error (a full disk, a read-only file system) instead of the advice about damaged shards.
[[noreturn]] void throw_hdf5_error(const std::string& what, const char* call, const char* file, int line);
// Turns HDF5's own printing of its error stack to stderr off on this thread (once): joule reports errors itself, once,
// with HDF5's account folded in. H5_CHECK calls it before every HDF5 call it checks.
void quiet_hdf5_on_this_thread();

}  // namespace joule::data

// Calls an HDF5 function returning hid_t or herr_t; a negative result throws Hdf5Error with the call,
// the file and line of the caller, and `what` (the file/dataset being accessed).
#define H5_CHECK(call, what)                                                                    \
  ([&]() {                                                                                      \
    ::joule::data::quiet_hdf5_on_this_thread();                                                 \
    auto h5_check_result_ = (call);                                                             \
    if (h5_check_result_ < 0) ::joule::data::throw_hdf5_error(what, #call, __FILE__, __LINE__); \
    return h5_check_result_;                                                                    \
  }())
