// Metal's shader logging (MSL 3.2, <metal_logging>): the `os_log` type, `os_log_default` and
// the log types. The lowering turns every `.log*(...)` call into `kiln::oslog::print` (defined
// per target in cpu/oslog.h and cuda/oslog.h) with a printf format whose conversions take what
// the helpers below return: integers widened to 64 bits, floats of any width to double.
#pragma once

namespace metal {

enum os_log_type_t : unsigned char {
  os_log_type_default = 0x00,
  os_log_type_info = 0x01,
  os_log_type_debug = 0x02,
  os_log_type_error = 0x10,
  os_log_type_fault = 0x11,
};
typedef os_log_type_t os_log_type;

// A log with a subsystem and category; `os_log_default` has neither.
struct os_log {
  const char* subsystem;
  const char* category;
  constexpr KILN_HD os_log() : subsystem(nullptr), category(nullptr) {}
  constexpr KILN_HD os_log(const char* subsystem_, const char* category_)
      : subsystem(subsystem_), category(category_) {}
};

KILN_CONSTANT os_log os_log_default;

}  // namespace metal

namespace kiln { namespace oslog {

// The words a line carries after its thread tag for each log type.
KILN_HD inline const char* level_name(int type) {
  switch (type) {
    case metal::os_log_type_info: return "info: ";
    case metal::os_log_type_debug: return "debug: ";
    case metal::os_log_type_error: return "error: ";
    case metal::os_log_type_fault: return "fault: ";
    default: return "";
  }
}

// `%d` of BITS-bit integers: narrowed as printf would, then passed as `long long` (`%lld`).
template <int BITS, class T> KILN_HD long long signed_arg(const T& v) {
  if (BITS == 8) return (long long)(signed char)v;
  if (BITS == 16) return (long long)(short)v;
  if (BITS == 32) return (long long)(int)v;
  return (long long)v;
}
template <int BITS, class T> KILN_HD unsigned long long unsigned_arg(const T& v) {
  if (BITS == 8) return (unsigned long long)(unsigned char)v;
  if (BITS == 16) return (unsigned long long)(unsigned short)v;
  if (BITS == 32) return (unsigned long long)(unsigned int)v;
  return (unsigned long long)v;
}
// half and bfloat go through float, as C's default promotions take float to double.
template <class T> KILN_HD double float_arg(const T& v) { return (double)(float)v; }
template <class T> KILN_HD int char_arg(const T& v) { return (int)(unsigned char)v; }
KILN_HD inline const char* string_arg(const char* s) { return s ? s : "(null)"; }
template <class T> KILN_HD unsigned long long pointer_arg(T* p) { return (unsigned long long)p; }

// The log a call names: a Metal `os_log`, or (a stand-in type with the same methods, as MLX's
// logging shim for older Metal declares) the default log.
KILN_HD inline const metal::os_log& as_log(const metal::os_log& l) { return l; }
template <class L> KILN_HD const metal::os_log& as_log(const L&) { return metal::os_log_default; }

// The subsystem/category part of a line: "sub/cat: " for a custom log, nothing for the default.
KILN_HD inline const char* log_part(const char* s) { return s ? s : ""; }
KILN_HD inline const char* log_slash(const metal::os_log& l) { return l.subsystem || l.category ? "/" : ""; }
KILN_HD inline const char* log_colon(const metal::os_log& l) { return l.subsystem || l.category ? ": " : ""; }

}}  // namespace kiln::oslog
