// The kvasir subcommands; each takes the arguments after its name and returns the exit code.
#pragma once

namespace kvasir {

int cmd_generate(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_detokenize(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_bench_serve(int argc, char** argv);  // `kvasir bench serve` (cmd_bench dispatches)
int cmd_serve(int argc, char** argv);
int cmd_render_template(int argc, char** argv);

}  // namespace kvasir
