#include "tests/http_client.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <sstream>
#include <stdexcept>

namespace flashspec::testing {

namespace {

// The body so far of a chunked message; sets `complete` at the last chunk.
std::string dechunk(const std::string& raw, bool& complete) {
  std::string out;
  size_t p = 0;
  complete = false;
  for (;;) {
    const size_t eol = raw.find("\r\n", p);
    if (eol == std::string::npos) return out;
    const size_t n = std::stoul(raw.substr(p, eol - p), nullptr, 16);
    if (n == 0) {
      complete = true;
      return out;
    }
    if (raw.size() < eol + 2 + n + 2) {
      out.append(raw, eol + 2, std::min(n, raw.size() - eol - 2));
      return out;
    }
    out.append(raw, eol + 2, n);
    p = eol + 2 + n + 2;
  }
}

struct Parsed {
  bool have_headers = false;
  size_t head_start = 0;  // past any interim (1xx) answers
  size_t body_start = 0;
};

// The final answer's status line and headers. Interim answers (1xx: "100 Continue")
// before it are counted and skipped, as HTTP/1.1 clients must.
void parse_head(const std::string& raw, Parsed& ps, HttpResponse& r) {
  for (;;) {
    const size_t end = raw.find("\r\n\r\n", ps.head_start);
    if (end == std::string::npos) return;
    std::istringstream in(raw.substr(ps.head_start, end - ps.head_start));
    std::string line;
    std::getline(in, line);
    const size_t sp = line.find(' ');
    const int status = sp == std::string::npos ? 0 : std::atoi(line.c_str() + sp + 1);
    if (status >= 100 && status < 200) {
      ++r.interim;
      ps.head_start = end + 4;
      continue;
    }
    r.status = status;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string name = line.substr(0, colon);
      for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
      std::string value = line.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.erase(0, 1);
      r.headers[name] = value;
    }
    ps.have_headers = true;
    ps.body_start = end + 4;
    return;
  }
}

void update_body(const std::string& raw, const Parsed& ps, HttpResponse& r, bool eof) {
  const std::string rest = raw.substr(ps.body_start);
  const auto te = r.headers.find("transfer-encoding");
  const auto cl = r.headers.find("content-length");
  if (te != r.headers.end() && te->second.find("chunked") != std::string::npos) {
    r.body = dechunk(rest, r.complete);
  } else if (cl != r.headers.end()) {
    const size_t n = std::stoul(cl->second);
    r.body = rest.substr(0, n);
    r.complete = rest.size() >= n;
  } else {
    r.body = rest;
    r.complete = eof;
  }
}

}  // namespace

HttpResponse http_call(int port, const HttpRequest& req, const std::function<bool(const std::string&)>& on_body,
                       double timeout_s) {
  HttpResponse r;
  const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return r;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(s);
    return r;
  }
  std::string head = req.method + " " + req.path + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) +
                     "\r\nConnection: close\r\n";
  if (!req.content_type.empty()) head += "Content-Type: " + req.content_type + "\r\n";
  if (req.method == "POST" || !req.body.empty()) head += "Content-Length: " + std::to_string(req.body.size()) + "\r\n";
  for (const auto& [k, v] : req.headers) head += k + ": " + v + "\r\n";
  head += "\r\n";
  const std::string msg = head + req.body;
  // A server may answer (and stop reading) before the whole body is sent: a failed send
  // is not the end, the answer is read anyway.
  for (size_t sent = 0; sent < msg.size();) {
    const ssize_t n = send(s, msg.data() + sent, msg.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += size_t(n);
  }
  std::string raw;
  Parsed ps;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                               std::chrono::duration<double>(timeout_s));
  for (;;) {
    pollfd p{s, POLLIN, 0};
    const int ms = int(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count());
    if (ms <= 0 || poll(&p, 1, ms) <= 0) break;
    char buf[65536];
    const ssize_t n = recv(s, buf, sizeof buf, 0);
    const bool eof = n <= 0;
    if (!eof) raw.append(buf, size_t(n));
    if (!ps.have_headers) parse_head(raw, ps, r);
    if (ps.have_headers) {
      update_body(raw, ps, r, eof);
      if (!eof && on_body && !on_body(r.body)) break;  // hang up
      if (r.complete) break;
    }
    if (eof) break;
  }
  close(s);
  return r;
}

HttpResponse http_get(int port, const std::string& path, const std::vector<std::pair<std::string, std::string>>& headers) {
  HttpRequest r;
  r.method = "GET";
  r.path = path;
  r.content_type.clear();
  r.headers = headers;
  return http_call(port, r);
}

HttpResponse http_post(int port, const std::string& path, const nlohmann::json& body,
                       const std::vector<std::pair<std::string, std::string>>& headers) {
  HttpRequest r;
  r.path = path;
  r.body = body.dump();
  r.headers = headers;
  return http_call(port, r);
}

RawConnection::RawConnection(int port) {
  fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd_ < 0 || connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close();
    throw std::runtime_error("cannot connect to port " + std::to_string(port));
  }
}

RawConnection::~RawConnection() { close(); }

void RawConnection::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool RawConnection::send(const std::string& bytes) {
  for (size_t sent = 0; sent < bytes.size();) {
    const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += size_t(n);
  }
  return true;
}

void RawConnection::shutdown_write() { ::shutdown(fd_, SHUT_WR); }

std::string RawConnection::read(double timeout_s, const std::function<bool(const std::string&)>& done) {
  std::string raw;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout_s));
  while (!(done && done(raw))) {
    pollfd p{fd_, POLLIN, 0};
    const int ms = int(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count());
    if (ms <= 0 || poll(&p, 1, ms) <= 0) break;
    char buf[65536];
    const ssize_t n = recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) break;
    raw.append(buf, size_t(n));
  }
  return raw;
}

std::string raw_request(const std::string& method, const std::string& path, const std::string& body,
                        const std::vector<std::pair<std::string, std::string>>& headers, const std::string& content_type) {
  std::string head = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  bool framed = false;  // the caller frames the body itself
  for (const auto& [k, v] : headers) framed = framed || k == "Transfer-Encoding" || k == "Content-Length";
  if (!content_type.empty() && (!body.empty() || method == "POST")) head += "Content-Type: " + content_type + "\r\n";
  if (!framed && (!body.empty() || method == "POST")) head += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  for (const auto& [k, v] : headers) head += k + ": " + v + "\r\n";
  return head + "\r\n" + body;
}

std::vector<HttpResponse> parse_responses(const std::string& raw) {
  std::vector<HttpResponse> out;
  size_t at = 0;
  while (at < raw.size()) {
    HttpResponse r;
    Parsed ps;
    ps.head_start = at;
    parse_head(raw, ps, r);
    if (!ps.have_headers) break;
    size_t end = std::string::npos;
    const auto te = r.headers.find("transfer-encoding");
    const auto cl = r.headers.find("content-length");
    if (te != r.headers.end() && te->second.find("chunked") != std::string::npos) {
      for (size_t p = ps.body_start;;) {
        const size_t eol = raw.find("\r\n", p);
        if (eol == std::string::npos) break;
        const size_t n = std::stoul(raw.substr(p, eol - p), nullptr, 16);
        if (raw.size() < eol + 2 + n + 2) break;
        if (n == 0) {
          end = eol + 4;
          break;
        }
        r.body.append(raw, eol + 2, n);
        p = eol + 2 + n + 2;
      }
    } else {
      const size_t n = cl != r.headers.end() ? std::stoul(cl->second) : raw.size() - ps.body_start;
      r.body = raw.substr(ps.body_start, n);
      if (raw.size() >= ps.body_start + n) end = ps.body_start + n;
    }
    r.complete = end != std::string::npos;
    out.push_back(std::move(r));
    if (!out.back().complete) break;
    at = end;
  }
  return out;
}

std::vector<nlohmann::json> sse_events(const std::string& body, bool* done) {
  std::vector<nlohmann::json> events;
  if (done) *done = false;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("data: ", 0) != 0) continue;
    const std::string data = line.substr(6);
    if (data == "[DONE]") {
      if (done) *done = true;
      continue;
    }
    events.push_back(nlohmann::json::parse(data));
  }
  return events;
}

double metric(const std::string& text, const std::string& name, const std::string& labels) {
  const std::string key = labels.empty() ? name + " " : name + "{" + labels + "} ";
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::stod(line.substr(key.size()));
  return -1;
}

}  // namespace flashspec::testing
