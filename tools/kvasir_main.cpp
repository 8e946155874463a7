// kvasir: the command-line entry point. Dispatches to one subcommand per file in tools/.
#include <cstdio>
#include <cstring>
#include <string>

#include "commands.h"

namespace {

void usage() {
  std::fprintf(stderr,
               "usage: kvasir <command> [options]\n\n"
               "commands:\n"
               "  generate     generate text for a prompt or a JSONL file of prompts\n"
               "  tokenize     print the token ids of a text\n"
               "  detokenize   print the text of token ids\n"
               "  bench        benchmarks: latency, throughput, serve (client for a running server)\n"
               "  serve        OpenAI-compatible HTTP server\n"
               "  render-template  print the chat prompt a request renders to\n\n"
               "Run `kvasir <command> --help` for its options.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "--version" || cmd == "version") {
    std::printf("kvasir 0.1.0\n");
    return 0;
  }
  if (cmd == "generate") return kvasir::cmd_generate(argc - 2, argv + 2);
  if (cmd == "tokenize") return kvasir::cmd_tokenize(argc - 2, argv + 2);
  if (cmd == "detokenize") return kvasir::cmd_detokenize(argc - 2, argv + 2);
  if (cmd == "bench") return kvasir::cmd_bench(argc - 2, argv + 2);
  if (cmd == "serve") return kvasir::cmd_serve(argc - 2, argv + 2);
  if (cmd == "render-template") return kvasir::cmd_render_template(argc - 2, argv + 2);
  std::fprintf(stderr, "kvasir: unknown command '%s'\n\n", cmd.c_str());
  usage();
  return 2;
}
