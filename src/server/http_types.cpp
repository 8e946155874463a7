#include "server/http_types.h"

#include <algorithm>
#include <ctime>

namespace kvasir::http {
namespace {

bool iequals(std::string_view a, std::string_view b) {
  auto lower = [](char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; };
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(),
                                            [&](char x, char y) { return lower(x) == lower(y); });
}

std::string http_date() {
  const time_t t = time(nullptr);
  struct tm tm {};
  gmtime_r(&t, &tm);
  char buf[64];
  const size_t n = strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return std::string(buf, n);
}

}  // namespace

const char* status_reason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 304: return "Not Modified";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 406: return "Not Acceptable";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: break;
  }
  if (status >= 100 && status < 200) return "Informational";
  if (status >= 200 && status < 300) return "Success";
  if (status >= 300 && status < 400) return "Redirection";
  if (status >= 400 && status < 500) return "Client Error";
  return "Server Error";
}

std::string format_response_head(int status,
                                 const std::vector<std::pair<std::string, std::string>>& headers,
                                 std::string_view framing, bool keep_alive) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + status_reason(status) + "\r\n";
  bool have_date = false;
  bool have_server = false;
  for (const auto& [k, v] : headers) {
    // Framing is ours to set, and no value may smuggle in a header or a second response.
    if (iequals(k, "content-length") || iequals(k, "transfer-encoding") ||
        iequals(k, "connection") || k.empty() || k.find_first_of("\r\n:") != std::string::npos ||
        v.find_first_of("\r\n") != std::string::npos) {
      continue;
    }
    have_date |= iequals(k, "date");
    have_server |= iequals(k, "server");
    out += k + ": " + v + "\r\n";
  }
  if (!have_date) out += "Date: " + http_date() + "\r\n";
  if (!have_server) out += "Server: kvasir\r\n";
  if (!framing.empty()) out.append(framing).append("\r\n");
  out += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  return out;
}

}  // namespace kvasir::http
