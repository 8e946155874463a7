#include "server/responses_stream.h"

#include "server/openai_response.h"
#include "server/responses_protocol.h"

namespace kvasir::server {

std::string sse_typed_event(const Json& e) {
  std::string s = "event: ";
  s += e.get_string("type");
  s += "\ndata: ";
  s += dump_json_utf8(e);
  s += "\n\n";
  return s;
}

Json ResponseEventStream::event(const char* type) {
  Json e = Json::object();
  e.set("type", type);
  e.set("sequence_number", seq_++);
  return e;
}

Json ResponseEventStream::item_event(const char* type) {
  Json e = event(type);
  e.set("item_id", item_id_);
  e.set("output_index", output_index_);
  return e;
}

Json ResponseEventStream::part_event(const char* type) {
  Json e = item_event(type);
  e.set("content_index", 0);
  return e;
}

void ResponseEventStream::emit(std::string* out, const Json& e) const { *out += sse_typed_event(e); }

std::string ResponseEventStream::begin(const Json& response) {
  std::string out;
  Json created = event("response.created");
  created.set("response", response);
  emit(&out, created);
  Json progress = event("response.in_progress");
  progress.set("response", response);
  emit(&out, progress);
  return out;
}

std::string ResponseEventStream::open(Kind kind, std::string* out) {
  kind_ = kind;
  ++output_index_;
  text_.clear();
  Json item;
  if (kind == Kind::kReasoning) {
    item_id_ = make_request_id("rs_");
    item = reasoning_item(item_id_, "", "in_progress");
    item.set("content", Json::array());
  } else if (kind == Kind::kMessage) {
    item_id_ = make_request_id("msg_");
    item = message_item(item_id_, "", "in_progress");
    item.set("content", Json::array());
  } else {
    item_id_ = make_request_id("fc_");
    item = function_call_item(item_id_, ToolCall{call_id_, call_name_, ""}, "in_progress");
  }
  Json added = event("response.output_item.added");
  added.set("output_index", output_index_);
  added.set("item", std::move(item));
  emit(out, added);
  if (kind != Kind::kCall) {
    Json part_added = part_event("response.content_part.added");
    if (kind == Kind::kMessage) {
      part_added.set("part", output_text_part(""));
    } else {
      Json part = Json::object();
      part.set("type", "reasoning_text");
      part.set("text", "");
      part_added.set("part", std::move(part));
    }
    emit(out, part_added);
  }
  return item_id_;
}

std::string ResponseEventStream::close_item() {
  std::string out;
  if (kind_ == Kind::kNone) return out;
  Json item;
  if (kind_ == Kind::kCall) {
    Json done = item_event("response.function_call_arguments.done");
    done.set("name", call_name_);
    done.set("arguments", text_);
    emit(&out, done);
    item = function_call_item(item_id_, ToolCall{call_id_, call_name_, text_}, "completed");
  } else {
    const bool msg = kind_ == Kind::kMessage;
    Json text_done = part_event(msg ? "response.output_text.done" : "response.reasoning_text.done");
    text_done.set("text", text_);
    if (msg) text_done.set("logprobs", Json::array());
    emit(&out, text_done);
    item = msg ? message_item(item_id_, text_, "completed") : reasoning_item(item_id_, text_, "completed");
    Json part_done = part_event("response.content_part.done");
    part_done.set("part", item.find("content")->as_array()[0]);
    emit(&out, part_done);
  }
  Json done = event("response.output_item.done");
  done.set("output_index", output_index_);
  done.set("item", item);
  emit(&out, done);
  output_.push_back(std::move(item));
  kind_ = Kind::kNone;
  return out;
}

std::string ResponseEventStream::add(const OutputDelta& d) {
  std::string out;
  if (!d.reasoning.empty()) {
    if (kind_ != Kind::kReasoning) {
      out += close_item();
      open(Kind::kReasoning, &out);
    }
    text_ += d.reasoning;
    reasoning_ += d.reasoning;
    Json e = part_event("response.reasoning_text.delta");
    e.set("delta", d.reasoning);
    emit(&out, e);
  }
  if (!d.content.empty()) {
    if (kind_ != Kind::kMessage) {
      out += close_item();
      open(Kind::kMessage, &out);
    }
    text_ += d.content;
    Json e = part_event("response.output_text.delta");
    e.set("delta", d.content);
    e.set("logprobs", Json::array());
    emit(&out, e);
  }
  for (const ToolCallDelta& c : d.tool_calls) {
    if (kind_ != Kind::kCall || c.index != call_index_) {
      out += close_item();
      call_index_ = c.index;
      call_id_ = c.id;
      call_name_ = c.name;
      open(Kind::kCall, &out);
    }
    if (c.arguments.empty()) continue;
    text_ += c.arguments;
    Json e = item_event("response.function_call_arguments.delta");
    e.set("delta", c.arguments);
    emit(&out, e);
  }
  return out;
}

std::string ResponseEventStream::finish_items() {
  std::string out;
  // Nothing generated: an empty message, as the non-streaming answer has.
  if (output_.size() == 0 && kind_ == Kind::kNone) open(Kind::kMessage, &out);
  out += close_item();
  return out;
}

std::string ResponseEventStream::end(const Json& response) {
  std::string out;
  const std::string status = response.get_string("status");
  const char* type = status == "failed" ? "response.failed"
                     : status == "incomplete" ? "response.incomplete"
                                              : "response.completed";
  Json e = event(type);
  e.set("response", response);
  emit(&out, e);
  return out;
}

}  // namespace kvasir::server
