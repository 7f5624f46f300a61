#include "engine/moe_switches.h"

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace flashspec {

MoeSwitches MoeSwitches::parse(std::string_view off) {
  MoeSwitches s;
  while (!off.empty()) {
    const size_t comma = off.find(',');
    const std::string_view part = off.substr(0, comma);
    if (part == "pricing")
      s.byte_pricing = false;
    else if (part == "guess")
      s.sure_guesses = false;
    else if (part == "cache")
      s.shared_cache = false;
    else if (part == "tokens")
      s.token_guess = false;
    else if (part == "prune")
      s.prune_rows = false;
    else if (part == "shape")
      s.shape_by_forecast = false;
    else if (!part.empty())
      throw Error("FLASHSPEC_MOE_OFF: unknown part '" + std::string(part) + "' (pricing, guess, cache, tokens, prune, shape)");
    off = comma == std::string_view::npos ? std::string_view{} : off.substr(comma + 1);
  }
  return s;
}

MoeSwitches MoeSwitches::from_environment() {
  const char* off = std::getenv("FLASHSPEC_MOE_OFF");
  return parse(off ? off : "");
}

}  // namespace flashspec
