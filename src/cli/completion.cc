// `meridian completion bash`: a bash completion script made from the command's own
// tree of subcommands and options, so it never falls behind them.
#include <functional>
#include <map>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace meridian::cli {

std::string BashCompletion(CLI::App& app) {
  // For each path of subcommands ("meridian", "meridian job", ...): its subcommands, and
  // its options' long and short names.
  std::map<std::string, std::string> words;
  std::map<std::string, std::string> subcommands;
  std::function<void(CLI::App*, const std::string&)> walk = [&](CLI::App* a, const std::string& path) {
    std::string& w = words[path];
    std::string& subs = subcommands[path];
    for (CLI::App* sub : a->get_subcommands([](CLI::App* s) { return !s->get_group().empty(); })) {
      w += sub->get_name() + " ";
      subs += sub->get_name() + " ";
      walk(sub, path + " " + sub->get_name());
    }
    for (const CLI::Option* o : a->get_options()) {
      if (!o->nonpositional() || o->get_group().empty()) continue;
      for (const std::string& l : o->get_lnames()) w += "--" + l + " ";
      for (const std::string& s : o->get_snames()) w += "-" + s + " ";
    }
  };
  // Keys start with "meridian": bash's associative arrays take no empty key.
  walk(&app, "meridian");
  std::ostringstream out;
  out << "# bash completion for meridian: source <(meridian completion bash)\n"
      << "declare -gA _meridian_words=(\n";
  for (const auto& [path, w] : words) out << "  [\"" << path << "\"]=\"" << w << "\"\n";
  out << ")\ndeclare -gA _meridian_subcommands=(\n";
  for (const auto& [path, s] : subcommands) out << "  [\"" << path << "\"]=\"" << s << "\"\n";
  out << ")\n"
         "_meridian() {\n"
         "  local cur=${COMP_WORDS[COMP_CWORD]} path=meridian w i\n"
         "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
         "    w=${COMP_WORDS[i]}\n"
         "    [[ $w == -* ]] && continue\n"
         "    [[ \" ${_meridian_subcommands[$path]} \" == *\" $w \"* ]] && path=\"$path $w\"\n"
         "  done\n"
         "  COMPREPLY=($(compgen -W \"${_meridian_words[$path]}\" -- \"$cur\"))\n"
         "}\n"
         "complete -o default -o bashdefault -F _meridian meridian\n";
  return out.str();
}

}  // namespace meridian::cli
