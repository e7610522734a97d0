#include "data/hdf5.h"

#include <cstdlib>
#include <cstring>

#include "launch/util/file_io.h"

namespace joule::data {
namespace {

// No HDF5 clean-up at exit: every handle joule opens is closed by its owner (Hdf5Handle) before then, and what HDF5
// would still find open is a file whose flush or close already failed (a full disk), whose clean-up at exit crashes
// HDF5 1.10 (H5F__close_cb). Must come before HDF5's first call: at load time, before main.
const bool kNoHdf5CleanupAtExit = (H5dont_atexit(), true);

}  // namespace

Hdf5Handle& Hdf5Handle::operator=(Hdf5Handle&& o) noexcept {
  if (this != &o) {
    reset();
    id_ = o.id_;
    o.id_ = H5I_INVALID_HID;
  }
  return *this;
}

void Hdf5Handle::reset() {
  if (id_ < 0) return;
  switch (H5Iget_type(id_)) {
    case H5I_FILE:
      H5Fclose(id_);
      break;
    case H5I_GROUP:
      H5Gclose(id_);
      break;
    case H5I_DATASET:
      H5Dclose(id_);
      break;
    case H5I_DATASPACE:
      H5Sclose(id_);
      break;
    case H5I_DATATYPE:
      H5Tclose(id_);
      break;
    case H5I_GENPROP_LST:
      H5Pclose(id_);
      break;
    case H5I_ATTR:
      H5Aclose(id_);
      break;
    default:
      break;
  }
  id_ = H5I_INVALID_HID;
}

[[noreturn]] void throw_hdf5_error(const std::string& what, const char* call, const char* file, int line) {
  struct Walk {
    std::string innermost;
    int os_errno = 0;
    std::string os_message;
  } walk;
  // Walked upward from where HDF5 found the failure: the innermost message says what failed; a message from the
  // file driver carries the operating system's "errno = N, error message = '...'".
  const auto visit = [](unsigned, const H5E_error2_t* e, void* data) -> herr_t {
    auto* w = static_cast<Walk*>(data);
    const std::string desc = e->desc ? e->desc : "";
    if (w->innermost.empty() && !desc.empty()) w->innermost = desc.substr(0, desc.find(','));
    const size_t at = desc.find("errno = ");
    if (w->os_errno == 0 && at != std::string::npos) {
      w->os_errno = std::atoi(desc.c_str() + at + 8);
      const size_t m = desc.find("error message = '", at);
      if (m != std::string::npos) w->os_message = desc.substr(m + 17, desc.find('\'', m + 17) - (m + 17));
    }
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, visit, &walk);
  H5Eclear2(H5E_DEFAULT);
  const std::string where = std::string(file) + ":" + std::to_string(line);
  if (walk.os_errno != 0)
    throw Hdf5Error(what + ": " + (walk.os_message.empty() ? std::strerror(walk.os_errno) : walk.os_message) +
                        " (errno " + std::to_string(walk.os_errno) + ", in HDF5 call " + call + " at " + where + ")",
                    joule::write_failure_hint(walk.os_errno));
  throw Hdf5Error(what + ": HDF5 call " + call + " failed (" + where + ")" +
                  (walk.innermost.empty() ? "" : " (HDF5: " + walk.innermost + ")"));
}

void quiet_hdf5_on_this_thread() {
  thread_local bool quiet = false;
  if (quiet) return;
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  quiet = true;
}

std::string hdf5_version() {
  unsigned major = 0, minor = 0, release = 0;
  H5get_libversion(&major, &minor, &release);
  return "HDF5 " + std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

}  // namespace joule::data
