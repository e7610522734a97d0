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

}  // namespace joule::data

// Calls an HDF5 function returning hid_t or herr_t; a negative result throws Hdf5Error with the call,
// the file and line of the caller, and `what` (the file/dataset being accessed).
#define H5_CHECK(call, what)                                                                             \
  ([&]() {                                                                                               \
    auto h5_check_result_ = (call);                                                                      \
    if (h5_check_result_ < 0)                                                                            \
      throw ::joule::data::Hdf5Error(std::string(what) + ": HDF5 call " #call " failed (" __FILE__ ":" + \
                                     std::to_string(__LINE__) + ")");                                    \
    return h5_check_result_;                                                                             \
  }())
