// POST /tokenize, POST /detokenize and GET /v1/models: the small synchronous endpoints.
#include "common/utf8.h"
#include "server/openai_response.h"
#include "server/serving_handlers.h"

namespace kvasir::server {
namespace {

void fail(http::Reply& reply, const Status& s) { reply.respond(error_response(api_error_from_status(s))); }

Json model_card(const ServingContext& ctx, const std::string& name) {
  Json m = Json::object();
  m.set("id", name);
  m.set("object", "model");
  m.set("created", unix_time_s());
  m.set("owned_by", "kvasir");
  m.set("root", ctx.options().model_root);
  m.set("parent", Json());
  m.set("max_model_len", ctx.max_model_len());
  return m;
}

// The answer is written straight into the body: a Json value per token would cost several
// times the ids themselves on a long prompt.
std::string tokenize_body(const ServingContext& ctx, const std::vector<int32_t>& ids, bool want_strs) {
  const Tokenizer& tok = ctx.tokenizer();
  std::string out = "{\"count\":" + std::to_string(ids.size()) + ",\"max_model_len\":" + std::to_string(ctx.max_model_len()) +
                    ",\"tokens\":[";
  out.reserve(out.size() + ids.size() * 7 + 32);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(ids[i]);
  }
  out += "],\"token_strs\":";
  if (!want_strs) {
    out += "null}";
    return out;
  }
  out += '[';
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ',';
    auto piece = tok.id_to_token(ids[i]);
    out += dump_json_utf8(piece ? Json(std::string(*piece)) : Json(token_text(tok, ids[i])));
  }
  out += "]}";
  return out;
}

}  // namespace

void serve_tokenize(ServingContext& ctx, const http::Request& hreq, http::Reply& reply) {
  auto body = parse_json_object_body(hreq.body);
  if (!body.ok()) return fail(reply, body.status());
  const Json* model = body->find("model");
  if (model && !model->is_null()) {
    if (!model->is_string()) return fail(reply, invalid_argument("'model' must be a string"));
    if (Status st = ctx.check_model(model->as_string()); !st.ok()) {
      return reply.respond(error_response(model_not_found_error(st)));
    }
  }
  bool add_special = true;
  std::string rendered;
  std::string_view text;  // the prompt inside the body, or the rendered chat
  if (const Json* msgs = body->find("messages"); msgs && !msgs->is_null()) {
    ChatRequest req;
    if (Status st = parse_chat_request(*body, SamplingParams(), &req); !st.ok()) return fail(reply, st);
    auto prompt = render_chat_request(ctx, req);
    if (!prompt.ok()) return fail(reply, prompt.status());
    rendered = std::move(*prompt);
    text = rendered;
    add_special = req.add_special_tokens;
  } else {
    const Json* p = body->find("prompt");
    if (!p || !p->is_string()) return fail(reply, invalid_argument("'prompt' must be a string (or send 'messages')"));
    text = p->as_string();
    if (const Json* a = body->find("add_special_tokens"); a && !a->is_null()) {
      if (!a->is_bool()) return fail(reply, invalid_argument("'add_special_tokens' must be a boolean"));
      add_special = a->as_bool();
    }
  }
  bool want_strs = false;
  if (const Json* r = body->find("return_token_strs"); r && !r->is_null()) {
    if (!r->is_bool()) return fail(reply, invalid_argument("'return_token_strs' must be a boolean"));
    want_strs = r->as_bool();
  }
  auto ids = ctx.tokenize_prompt(text, add_special);
  if (!ids.ok()) return fail(reply, ids.status());
  http::Response r;
  r.headers.emplace_back("Content-Type", "application/json");
  r.body = tokenize_body(ctx, *ids, want_strs);
  reply.respond(std::move(r));
}

void serve_detokenize(ServingContext& ctx, const http::Request& hreq, http::Reply& reply) {
  auto body = parse_json_object_body(hreq.body);
  if (!body.ok()) return fail(reply, body.status());
  const Json* model = body->find("model");
  if (model && model->is_string()) {
    if (Status st = ctx.check_model(model->as_string()); !st.ok()) {
      return reply.respond(error_response(model_not_found_error(st)));
    }
  }
  const Json* t = body->find("tokens");
  if (!t) return fail(reply, invalid_argument("'tokens' is required"));
  std::vector<int32_t> ids;
  if (Status st = parse_token_list(*t, "tokens", &ids); !st.ok()) return fail(reply, st);
  for (int32_t id : ids) {
    if (id < 0 || id >= ctx.vocab_size()) {
      return fail(reply, invalid_argument("Token id " + std::to_string(id) + " is out of vocabulary [0, " +
                                              std::to_string(ctx.vocab_size()) + ")."));
    }
  }
  Json out = Json::object();
  out.set("prompt", utf8_sanitize(ctx.tokenizer().decode(ids, /*skip_special_tokens=*/false)));
  reply.respond(json_response(200, out));
}

http::Response serve_models(const ServingContext& ctx, const std::string& model_id) {
  const auto& names = ctx.options().served_model_names;
  if (!model_id.empty()) {
    for (const auto& n : names) {
      if (n == model_id) return json_response(200, model_card(ctx, n));
    }
    return error_response(model_not_found_error(not_found("The model `" + model_id + "` does not exist.")));
  }
  Json data = Json::array();
  for (const auto& n : names) data.push_back(model_card(ctx, n));
  Json out = Json::object();
  out.set("object", "list");
  out.set("data", std::move(data));
  return json_response(200, out);
}

}  // namespace kvasir::server
