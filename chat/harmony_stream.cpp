#include "chat/harmony_stream.h"

#include <algorithm>
#include <span>

#include "chat/chat_harmony.h"

namespace flashspec {

namespace {

using namespace harmony;
using Markers = std::span<const std::string_view>;

// What ends the text being read in each state.
constexpr std::string_view kHeaderEnds[] = {kMessage, kEnd, kReturn, kCall, kStart};
constexpr std::string_view kBodyEnds[] = {kEnd, kReturn, kCall, kStart};
constexpr std::string_view kBetweenEnds[] = {kStart, kEnd, kReturn, kCall};  // a stray <|end|>: dropped

constexpr size_t kMaxFirstHeader = 256;  // real headers are a few dozen bytes

struct Hit {
  size_t pos = std::string::npos;
  std::string_view marker;
};

Hit first_of(const std::string& s, Markers markers) {
  Hit h;
  for (std::string_view m : markers)
    if (const size_t p = s.find(m); p < h.pos) h = {p, m};
  return h;
}

// Length of the longest tail of `s` that may still grow into one of `markers`.
size_t held_tail(const std::string& s, Markers markers) {
  size_t best = 0;
  for (std::string_view m : markers)
    for (size_t k = std::min(s.size(), m.size() - 1); k > best; --k)
      if (s.compare(s.size() - k, k, m, 0, k) == 0) {
        best = k;
        break;
      }
  return best;
}

// The value of a header field ("<|channel|>final", " to=functions.x") up to the next space or marker.
std::string_view field_after(std::string_view header, size_t from) {
  const std::string_view rest = header.substr(from);
  return rest.substr(0, rest.find_first_of(" <"));
}

}  // namespace

HarmonyText HarmonyStream::push(std::string_view text) {
  HarmonyText out;
  if (state_ == State::Done) return out;
  pending_.append(text);
  run(out, false);
  return out;
}

HarmonyText HarmonyStream::flush() {
  HarmonyText out;
  run(out, true);
  return out;
}

bool HarmonyStream::foreign_role(bool closed) {
  if (!expect_role_) return false;
  const size_t stop = header_.find_first_of(" <");
  if (stop == std::string::npos && !closed) return false;  // the role is still arriving
  expect_role_ = false;
  const std::string_view role = std::string_view(header_).substr(0, stop);
  return !role.empty() && role != "assistant";
}

bool HarmonyStream::raw_first_header() const {
  return first_header_ && header_.find("<|") == std::string::npos;
}

void HarmonyStream::header_done() {
  const std::string_view h = header_;
  const size_t channel_at = h.find(kChannel);
  const std::string_view channel = channel_at == std::string_view::npos ? "" : field_after(h, channel_at + kChannel.size());
  size_t to_at = h.find(" to=");
  to_at = to_at != std::string_view::npos ? to_at + 4 : h.rfind("to=", 0) == 0 ? 3 : std::string_view::npos;
  const std::string_view recipient = to_at == std::string_view::npos ? "" : field_after(h, to_at);
  constexpr std::string_view kFunctions = "functions.";
  if (recipient.starts_with(kFunctions) && recipient.size() > kFunctions.size()) {
    sink_ = Sink::Call;
    call_name_ = recipient.substr(kFunctions.size());
    call_body_.clear();
  } else if (!recipient.empty() && recipient != "assistant") {
    sink_ = Sink::Dropped;
  } else if (channel == "analysis") sink_ = Sink::Reasoning;
  else sink_ = Sink::Content;
  header_.clear();
  first_header_ = false;
  state_ = State::Body;
}

void HarmonyStream::send(HarmonyText& out, std::string_view s) {
  switch (sink_) {
    case Sink::Reasoning: out.reasoning += s; break;
    case Sink::Content: out.content += s; break;
    case Sink::Call: call_body_ += s; break;
    case Sink::Dropped: break;
  }
}

void HarmonyStream::run(HarmonyText& out, bool at_end) {
  for (;;) {
    if (state_ == State::Done) {
      pending_.clear();
      return;
    }
    if (state_ == State::Raw) {
      out.content += pending_;
      pending_.clear();
      return;
    }
    // The markers that end what is being read now; text before them is final, a tail that
    // may be the start of one waits for the next push (or the end).
    const Markers ends = state_ == State::Header ? Markers(kHeaderEnds)
                         : state_ == State::Body ? Markers(kBodyEnds)
                                                 : Markers(kBetweenEnds);
    const Hit h = first_of(pending_, ends);
    const size_t take = h.pos != std::string::npos ? h.pos : pending_.size() - (at_end ? 0 : held_tail(pending_, ends));
    const std::string_view text = std::string_view(pending_).substr(0, take);
    switch (state_) {
      case State::Header: header_ += text; break;
      case State::Body: send(out, text); break;
      case State::Between: out.content += text; break;  // nothing belongs here: never lose it
      case State::Raw:
      case State::Done: break;
    }
    pending_.erase(0, h.pos != std::string::npos ? h.pos + h.marker.size() : take);

    if (state_ == State::Header && foreign_role(h.pos != std::string::npos || at_end)) {
      state_ = State::Done;  // the model began another speaker's message
      continue;
    }
    if (h.pos == std::string::npos) {
      if (state_ == State::Header && raw_first_header() && (at_end || header_.size() > kMaxFirstHeader)) {
        out.content += header_;  // no harmony in sight: pass the text on
        header_.clear();
        state_ = State::Raw;
        continue;
      }
      if (at_end) header_.clear();  // a header cut short shows nothing
      return;
    }
    if (state_ == State::Body && sink_ == Sink::Call) {  // the call's message ended
      const size_t first = call_body_.find_first_not_of(" \t\r\n");
      const size_t last = call_body_.find_last_not_of(" \t\r\n");
      out.calls.push_back({call_name_, first == std::string::npos ? "" : call_body_.substr(first, last - first + 1)});
      sink_ = Sink::Dropped;
    }
    if (state_ == State::Header) {
      if (h.marker == kMessage) {
        header_done();
        continue;
      }
      if (raw_first_header()) out.content += header_;  // text, then a marker: it was no header
      header_.clear();
      first_header_ = false;
    }
    if (h.marker == kStart) {
      state_ = State::Header;
      expect_role_ = true;
    } else if (h.marker == kEnd) {
      state_ = State::Between;
    } else {
      state_ = State::Done;  // <|return|> or <|call|>
    }
  }
}

HarmonyText parse_harmony(std::string_view answer) {
  HarmonyStream s;
  HarmonyText out = s.push(answer);
  const HarmonyText rest = s.flush();
  out.reasoning += rest.reasoning;
  out.content += rest.content;
  out.calls.insert(out.calls.end(), rest.calls.begin(), rest.calls.end());
  return out;
}

}  // namespace flashspec
