// How joule's tables, reports and log lines format their figures. format_number: one number through a printf format
// ("%.3g", "%+.1f %%"). The rest write figures people read: never an exponent, never an SI prefix glued to a unit
// ("4.85k h"), thousands separated ("2,091"), durations in s, min, h or days, energy in J, Wh, kWh or MWh. No LibTorch.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace joule {

inline std::string format_number(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// With thousands separators: grouped(2091) = "2,091", grouped(1234.5, 1) = "1,234.5".
inline std::string grouped(double v, int decimals = 0) {
  std::string s = format_number(("%." + std::to_string(decimals) + "f").c_str(), v);
  const size_t digits_begin = s[0] == '-' || s[0] == '+' ? 1 : 0;
  size_t digits_end = s.find('.');
  if (digits_end == std::string::npos) digits_end = s.size();
  for (size_t i = digits_end; i > digits_begin + 3; i -= 3) s.insert(i - 3, ",");
  return s;
}

// At most `significant` digits in plain decimals, without trailing zeros, grouped from 1,000 on: 0.000137, 5.98, 42,
// 1,250, 38,509. Tinier than 1e-9 reads as 0; not finite as "?".
inline std::string readable(double v, int significant = 3) {
  if (!std::isfinite(v)) return "?";
  const double a = std::fabs(v);
  if (a < 1e-9) return "0";
  const int magnitude = static_cast<int>(std::floor(std::log10(a)));
  int decimals = std::clamp(significant - 1 - magnitude, 0, 12);
  // Rounding may carry into the next magnitude (9.996 -> 10.0): one decimal fewer then.
  if (decimals > 0 && std::fabs(std::stod(format_number(("%." + std::to_string(decimals) + "f").c_str(), v))) >=
                          std::pow(10.0, magnitude + 1))
    --decimals;
  std::string text = grouped(v, decimals);
  if (decimals > 0) {
    while (text.back() == '0') text.pop_back();
    if (text.back() == '.') text.pop_back();
  }
  return text;
}

// "16.7 s", "30 min", "27.2 h", "4.17 days": the largest unit the duration reaches (days from 48 h on).
inline std::string duration_text(double seconds) {
  if (!std::isfinite(seconds)) return "?";
  const double a = std::fabs(seconds);
  if (a < 120) return readable(seconds) + " s";
  if (a < 7200) return readable(seconds / 60) + " min";
  if (a < 48 * 3600) return readable(seconds / 3600) + " h";
  return readable(seconds / 86400) + " days";
}

// "3.6 J", "59.8 Wh", "154 kWh", "1.23 MWh", "4,850 MWh": each a unit of its own, never a prefix of another unit.
inline std::string energy_text(double kwh) {
  if (!std::isfinite(kwh)) return "?";
  const double wh = kwh * 1000, a = std::fabs(wh);
  if (a == 0) return "0 Wh";
  if (a < 0.01) return readable(wh * 3600) + " J";
  if (a < 1000) return readable(wh) + " Wh";
  if (a < 1e6) return readable(kwh) + " kWh";
  return readable(kwh / 1000) + " MWh";
}

// "USD 0.000746", "USD 8.50", "USD 1,820": cents from a dollar on, whole dollars from 1,000.
inline std::string usd_text(double usd) {
  const double a = std::fabs(usd);
  if (!std::isfinite(usd)) return "USD ?";
  if (a >= 1000) return "USD " + grouped(usd);
  if (a >= 1) return "USD " + grouped(usd, 2);
  return "USD " + readable(usd);
}

// "103 g", "1.17 kg", "2.5 t" of CO2 (the caller names the gas).
inline std::string mass_text(double kg) {
  if (!std::isfinite(kg)) return "?";
  const double a = std::fabs(kg);
  if (a == 0) return "0 kg";
  if (a < 1) return readable(kg * 1000) + " g";
  if (a < 1000) return readable(kg) + " kg";
  return readable(kg / 1000) + " t";
}

}  // namespace joule
