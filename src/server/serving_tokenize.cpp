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
  std::string text;
  if (const Json* msgs = body->find("messages"); msgs && !msgs->is_null()) {
    ChatRequest req;
    if (Status st = parse_chat_request(*body, SamplingParams(), &req); !st.ok()) return fail(reply, st);
    auto prompt = render_chat_request(ctx, req);
    if (!prompt.ok()) return fail(reply, prompt.status());
    text = std::move(*prompt);
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
  const Tokenizer& tok = ctx.tokenizer();
  std::vector<int32_t> ids = tok.encode(text, add_special);
  Json tokens = Json::array();
  Json strs = want_strs ? Json::array() : Json();
  for (int32_t id : ids) {
    tokens.push_back(id);
    if (want_strs) {
      auto piece = tok.id_to_token(id);
      strs.push_back(piece ? Json(std::string(*piece)) : Json(token_text(tok, id)));
    }
  }
  Json out = Json::object();
  out.set("count", static_cast<int64_t>(ids.size()));
  out.set("max_model_len", ctx.max_model_len());
  out.set("tokens", std::move(tokens));
  out.set("token_strs", std::move(strs));
  reply.respond(json_response(200, out));
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
