#pragma once
// JSON written as chat templates write it with `tojson` (@huggingface/jinja, like Python's
// json.dumps): ", " between items and ": " after keys on one line, or with `indent` one item
// per line ("," at the line's end); keys in the order given; non-ASCII characters as they
// are. Models were trained on tool definitions and arguments spelled this way.
#include <nlohmann/json.hpp>
#include <string>

namespace flashspec {

// indent < 0: one line.
std::string template_json(const nlohmann::ordered_json& value, int indent = -1);

}  // namespace flashspec
