// Opening the CUDA toolkit's large libraries (cuBLAS, NCCL) at run time rather than
// linking them, so that a Meridian process maps them only when it uses them.
#pragma once

#include <dlfcn.h>

#include <string>

namespace meridian::kernels::cuda {

// `soname` from the loader's path, else from the toolkit's library directory this build
// found (MERIDIAN_CUDA_LIBRARY_DIR); null with *error saying why.
inline void* OpenLibrary(const std::string& soname, std::string* error) {
  void* h = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
#ifdef MERIDIAN_CUDA_LIBRARY_DIR
  if (h == nullptr) h = dlopen((std::string(MERIDIAN_CUDA_LIBRARY_DIR) + "/" + soname).c_str(), RTLD_NOW | RTLD_LOCAL);
#endif
  if (h == nullptr) {
    const char* why = dlerror();
    *error = "cannot open " + soname + ": " + (why ? why : "unknown error");
  }
  return h;
}

}  // namespace meridian::kernels::cuda
