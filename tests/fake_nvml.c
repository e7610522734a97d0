/* A test double of libnvidia-ml.so.1: the NVML symbols joule's nvml meter uses, loaded through the same dlopen
 * path. Each energy read advances the counter by 2,500 mJ; FAKE_NVML_NO_ENERGY makes the energy counter
 * unsupported (pre-Volta), so the meter integrates the 250 W power reading instead; FAKE_NVML_INIT_FAIL makes
 * nvmlInit_v2 fail; FAKE_NVML_READ_FAIL makes energy and power reads fail (GPU lost) after start; FAKE_NVML_NO_INDEX makes the
 * lookup by index fail (so a test sees the lookup by PCI bus id is the one used); two devices exist. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static unsigned long long energy_mj[2] = {1000000ull, 5000000ull};

int nvmlInit_v2(void) { return getenv("FAKE_NVML_INIT_FAIL") ? 999 : 0; }
int nvmlShutdown(void) { return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** device) {
  if (index >= 2 || getenv("FAKE_NVML_NO_INDEX")) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
  *device = (void*)(uintptr_t)(index + 1);
  return 0;
}
/* The two devices sit at PCI bus ids 00000000:3B:00.0 and 00000000:5C:00.0. */
int nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, void** device) {
  unsigned index;
  if (strcmp(bus_id, "00000000:3B:00.0") == 0) index = 0;
  else if (strcmp(bus_id, "00000000:5C:00.0") == 0) index = 1;
  else return 6; /* NVML_ERROR_NOT_FOUND */
  *device = (void*)(uintptr_t)(index + 1);
  return 0;
}
int nvmlDeviceGetTotalEnergyConsumption(void* device, unsigned long long* mj) {
  if (getenv("FAKE_NVML_NO_ENERGY")) return 3; /* NVML_ERROR_NOT_SUPPORTED */
  if (getenv("FAKE_NVML_READ_FAIL")) return 15; /* NVML_ERROR_GPU_IS_LOST */
  unsigned i = (unsigned)(uintptr_t)device - 1;
  energy_mj[i] += 2500;
  *mj = energy_mj[i];
  return 0;
}
int nvmlDeviceGetPowerUsage(void* device, unsigned* mw) {
  (void)device;
  if (getenv("FAKE_NVML_READ_FAIL")) return 15;
  *mw = 250000;
  return 0;
}
