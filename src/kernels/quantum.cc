#include "kernels/quantum.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <queue>
#include <unordered_map>

#include <fmt/format.h>

#include "common/units.h"
#include "kernels/generate.h"
#include "kernels/kernel_args.h"

namespace meridian::kernels {
namespace {

// Probabilities below this are rounding noise of a double-precision state, not outcomes.
constexpr double kNoise = 1e-15;

double Probability(const std::vector<double>& state, uint64_t i) {
  return state[2 * i] * state[2 * i] + state[2 * i + 1] * state[2 * i + 1];
}

bool MeasuresAllInOrder(const Circuit& c) {
  if (c.measures.empty()) return true;
  if (c.clbits != c.qubits || static_cast<int32_t>(c.measures.size()) != c.qubits) return false;
  for (const auto& [q, b] : c.measures) {
    if (q != b) return false;
  }
  return true;
}

// The classical bits that basis state `index` writes (callers take the index itself
// when MeasuresAllInOrder, which is worth asking once, not per amplitude).
uint64_t OutcomeOf(const Circuit& c, uint64_t index) {
  uint64_t v = 0;
  for (const auto& [q, b] : c.measures) {
    if ((index >> q) & 1) v |= uint64_t{1} << b;
  }
  return v;
}

std::string Bits(uint64_t v, int32_t width) {
  std::string s(static_cast<size_t>(width), '0');
  for (int32_t k = 0; k < width; ++k) {
    if ((v >> k) & 1) s[static_cast<size_t>(width - 1 - k)] = '1';
  }
  return s;
}

// key=value fields of one line after its first word.
std::map<std::string, std::string> KeyValues(std::string_view line) {
  std::map<std::string, std::string> out;
  size_t i = line.find(' ');
  while (i != std::string_view::npos && i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    size_t end = line.find(' ', i);
    std::string_view f = line.substr(i, end == std::string_view::npos ? std::string_view::npos : end - i);
    size_t eq = f.find('=');
    if (eq != std::string_view::npos) out[std::string(f.substr(0, eq))] = std::string(f.substr(eq + 1));
    i = end;
  }
  return out;
}

StatusOr<std::vector<double>> NumberList(const std::string& text, std::string_view what) {
  std::vector<double> out;
  size_t i = 0;
  while (i <= text.size()) {
    size_t end = text.find(',', i);
    if (end == std::string::npos) end = text.size();
    MERIDIAN_ASSIGN_OR_RETURN(double v, ParseDouble(std::string_view(text).substr(i, end - i), what));
    out.push_back(v);
    i = end + 1;
  }
  return out;
}

std::string Join(const std::vector<double>& v) {
  std::string out;
  for (double x : v) out += (out.empty() ? "" : ",") + fmt::format("{:.17g}", x);
  return out;
}

StatusOr<std::string> Field(const std::map<std::string, std::string>& f, const std::string& key, std::string_view line) {
  auto it = f.find(key);
  if (it == f.end()) return InvalidArgumentError(fmt::format("'{}' has no {}=", line.substr(0, 60), key));
  return it->second;
}

struct Simulated {
  Circuit circuit;
  std::vector<QGate> fused;
  std::vector<double> state;
};

StatusOr<Simulated> Simulate(const KernelContext& ctx, std::string_view qasm) {
  Simulated s;
  StatusOr<Circuit> c = ParseQasm(qasm);
  if (!c.ok()) return c.status().WithPrefix("circuit");
  s.circuit = *std::move(c);
  // The state is what the task chose to hold: within what it was given, checked before
  // anything is allocated.
  const int64_t need = int64_t{16} << s.circuit.qubits;
  if (ctx.memory_bytes >= 0 && need > ctx.memory_bytes) {
    return ResourceExhaustedError(fmt::format(
        "{} qubits need {} of state; this task was given {} (ask for it: resources: {{qubits: {}}})",
        s.circuit.qubits, FormatBytes(need), FormatBytes(ctx.memory_bytes), s.circuit.qubits));
  }
  s.fused = FuseGates(s.circuit.gates);
  MERIDIAN_ASSIGN_OR_RETURN(const Ops* ops, OpsFor(ctx));
  MERIDIAN_RETURN_IF_ERROR(ops->Simulate(s.circuit.qubits, s.fused, s.state, ctx.stop));
  return s;
}

}  // namespace

int32_t OutcomeBits(const Circuit& c) { return c.measures.empty() ? c.qubits : c.clbits; }

std::vector<std::pair<uint64_t, double>> TopOutcomes(const Circuit& c, const std::vector<double>& state, size_t top) {
  // Probabilities are ranked to within the noise (1e-15), so that outcomes equally
  // likely but for rounding are listed by outcome, the same on every device. The
  // worst kept outcome is on top of the heap: least probable, then the larger outcome.
  auto rank = [](double p) { return std::llround(p / kNoise); };
  auto worse = [&](const std::pair<uint64_t, double>& a, const std::pair<uint64_t, double>& b) {
    const int64_t ra = rank(a.second), rb = rank(b.second);
    return ra != rb ? ra > rb : a.first < b.first;
  };
  std::priority_queue<std::pair<uint64_t, double>, std::vector<std::pair<uint64_t, double>>, decltype(worse)> kept(worse);
  auto offer = [&](uint64_t outcome, double p) {
    if (rank(p) == 0 || top == 0) return;
    if (kept.size() < top) {
      kept.emplace(outcome, p);
    } else if (worse({outcome, p}, kept.top())) {
      kept.pop();
      kept.emplace(outcome, p);
    }
  };
  const uint64_t amplitudes = state.size() / 2;
  if (MeasuresAllInOrder(c)) {
    for (uint64_t i = 0; i < amplitudes; ++i) offer(i, Probability(state, i));
  } else {
    std::unordered_map<uint64_t, double> marginal;
    for (uint64_t i = 0; i < amplitudes; ++i) {
      const double p = Probability(state, i);
      if (p > 0) marginal[OutcomeOf(c, i)] += p;
    }
    for (const auto& [outcome, p] : marginal) offer(outcome, p);
  }
  std::vector<std::pair<uint64_t, double>> out;
  while (!kept.empty()) {
    out.push_back(kept.top());
    kept.pop();
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::pair<uint64_t, int64_t>> SampleOutcomes(const Circuit& c, const std::vector<double>& state,
                                                         int64_t shots, uint64_t seed) {
  // Sorted uniforms, then one pass over the cumulative distribution in index order.
  const uint64_t amplitudes = state.size() / 2;
  double total = 0;
  for (uint64_t i = 0; i < amplitudes; ++i) total += Probability(state, i);
  std::vector<double> u(static_cast<size_t>(shots));
  for (int64_t k = 0; k < shots; ++k) u[k] = gen::Unit(seed, static_cast<uint64_t>(k)) * total;
  std::sort(u.begin(), u.end());
  std::map<uint64_t, int64_t> counts;
  const bool identity = MeasuresAllInOrder(c);
  double cumulative = 0;
  size_t k = 0;
  for (uint64_t i = 0; i < amplitudes && k < u.size(); ++i) {
    cumulative += Probability(state, i);
    const bool last = i + 1 == amplitudes;
    size_t here = 0;
    while (k < u.size() && (u[k] < cumulative || last)) {
      ++k;
      ++here;
    }
    if (here > 0) counts[identity ? i : OutcomeOf(c, i)] += static_cast<int64_t>(here);
  }
  std::vector<std::pair<uint64_t, int64_t>> out(counts.begin(), counts.end());
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

StatusOr<Graph> ParseGraph(std::string_view text) {
  Graph g;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == ',')) ++i;
    if (i >= text.size()) break;
    size_t end = text.find_first_of(" ,", i);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view edge = text.substr(i, end - i);
    const size_t dash = edge.find('-');
    if (dash == std::string_view::npos) {
      return InvalidArgumentError(fmt::format("graph: '{}' is not an edge like 0-1", edge));
    }
    MERIDIAN_ASSIGN_OR_RETURN(int64_t a, ParseInt(edge.substr(0, dash), "graph: a node"));
    MERIDIAN_ASSIGN_OR_RETURN(int64_t b, ParseInt(edge.substr(dash + 1), "graph: a node"));
    if (a < 0 || b < 0 || a >= 26 || b >= 26 || a == b) {
      return InvalidArgumentError(fmt::format("graph: edge '{}': nodes are 0 to 25, two different ones", edge));
    }
    g.edges.emplace_back(static_cast<int32_t>(a), static_cast<int32_t>(b));
    g.nodes = std::max<int32_t>(g.nodes, static_cast<int32_t>(std::max(a, b)) + 1);
    i = end;
  }
  if (g.edges.empty()) return InvalidArgumentError("graph: no edges (write them like '0-1 1-2 2-0')");
  return g;
}

int32_t CutSize(const Graph& g, uint64_t assignment) {
  int32_t cut = 0;
  for (const auto& [a, b] : g.edges) cut += ((assignment >> a) & 1) != ((assignment >> b) & 1);
  return cut;
}

std::string QaoaCircuit(const Graph& g, const std::vector<double>& gammas, const std::vector<double>& betas) {
  // exp(-i gamma C) with C = sum over edges of (1 - Z_a Z_b) / 2 is, up to a global
  // phase, rzz(-gamma) on each edge; the mixer exp(-i beta sum X) is rx(2 beta).
  std::string q = fmt::format("OPENQASM 2.0;\ninclude \"qelib1.inc\";\nqreg q[{}];\ncreg c[{}];\nh q;\n", g.nodes, g.nodes);
  for (size_t layer = 0; layer < gammas.size(); ++layer) {
    for (const auto& [a, b] : g.edges) q += fmt::format("rzz({:.17g}) q[{}],q[{}];\n", -gammas[layer], a, b);
    q += fmt::format("rx({:.17g}) q;\n", 2 * betas[layer]);
  }
  q += "measure q -> c;\n";
  return q;
}

std::string LayeredCircuit(int32_t qubits, int32_t layers, uint64_t seed) {
  std::string q = fmt::format("OPENQASM 2.0;\ninclude \"qelib1.inc\";\nqreg q[{}];\n", qubits);
  uint64_t draw = 0;
  for (int32_t l = 0; l < layers; ++l) {
    for (int32_t k = 0; k < qubits; ++k) {
      static constexpr const char* kRotations[] = {"rx", "ry", "rz"};
      const uint64_t which = gen::Bits(seed, draw++) % 4;
      if (which == 3) {
        q += fmt::format("h q[{}];\n", k);
      } else {
        q += fmt::format("{}({:.17g}) q[{}];\n", kRotations[which], gen::Unit(seed, draw++) * 2 * M_PI, k);
      }
    }
    for (int32_t k = l % 2; k + 1 < qubits; k += 2) q += fmt::format("cx q[{}],q[{}];\n", k, k + 1);
  }
  return q;
}

namespace builtin {

StatusOr<std::string> QSim(const KernelContext& ctx) {
  MERIDIAN_RETURN_IF_ERROR(CheckArgs(ctx, "qsim", {"circuit", "output", "shots", "seed", "top"}));
  auto circuit = ctx.args.find("circuit");
  if ((circuit == ctx.args.end()) == ctx.inputs.empty()) {
    return InvalidArgumentError("qsim needs its circuit (OpenQASM 2.0) in the argument 'circuit' or as its one input, "
                                "not both");
  }
  if (circuit == ctx.args.end() && ctx.inputs.size() != 1) {
    return InvalidArgumentError(fmt::format("qsim takes one input, its circuit, not {}", ctx.inputs.size()));
  }
  auto output = ctx.args.find("output");
  const std::string mode = output == ctx.args.end() ? "probabilities" : output->second;
  if (mode != "probabilities" && mode != "counts" && mode != "amplitudes") {
    return InvalidArgumentError(
        fmt::format("argument 'output': expected probabilities, counts or amplitudes, got '{}'", mode));
  }
  MERIDIAN_ASSIGN_OR_RETURN(int64_t top, ArgInt(ctx, "top", 32, 1, 65'536));
  MERIDIAN_ASSIGN_OR_RETURN(int64_t shots, ArgInt(ctx, "shots", 1024, 1, 100'000'000));
  MERIDIAN_ASSIGN_OR_RETURN(int64_t seed, ArgInt(ctx, "seed", ctx.index, 0, INT64_MAX));
  MERIDIAN_ASSIGN_OR_RETURN(Simulated s, Simulate(ctx, circuit == ctx.args.end() ? ctx.inputs[0] : circuit->second));
  const Circuit& c = s.circuit;
  std::string out = fmt::format("qsim qubits={} clbits={} gates={} fused={} output={}\n", c.qubits, c.clbits,
                                c.gates.size(), s.fused.size(), mode);
  const int32_t width = OutcomeBits(c);
  if (mode == "probabilities") {
    for (const auto& [v, p] : TopOutcomes(c, s.state, static_cast<size_t>(top))) {
      fmt::format_to(std::back_inserter(out), "{} {:.12g}\n", Bits(v, width), p);
    }
  } else if (mode == "counts") {
    for (const auto& [v, n] : SampleOutcomes(c, s.state, shots, static_cast<uint64_t>(seed))) {
      fmt::format_to(std::back_inserter(out), "{} {}\n", Bits(v, width), n);
    }
  } else {
    // Amplitudes in index order (qubit k is bit k), the first `top` above the noise.
    int64_t shown = 0;
    for (uint64_t i = 0; i < s.state.size() / 2 && shown < top; ++i) {
      if (Probability(s.state, i) < kNoise) continue;
      fmt::format_to(std::back_inserter(out), "{} {:.17g} {:.17g}\n", Bits(i, c.qubits), s.state[2 * i], s.state[2 * i + 1]);
      ++shown;
    }
  }
  return out;
}

namespace {

constexpr std::string_view kPoint = "qaoa-point ";
constexpr std::string_view kSearch = "qaoa-search ";

struct Search {
  int64_t round = 1;
  std::vector<double> center;     // gamma_1..gamma_p, beta_1..beta_p
  std::vector<double> halfwidth;  // of the grid on each axis
};

// The first round's grid: gamma over [0, pi], beta over [0, pi/2] (MaxCut's periods).
Search FirstSearch(int64_t layers) {
  Search s;
  for (int64_t k = 0; k < layers; ++k) {
    s.center.push_back(M_PI / 2);
    s.halfwidth.push_back(M_PI / 2);
  }
  for (int64_t k = 0; k < layers; ++k) {
    s.center.push_back(M_PI / 4);
    s.halfwidth.push_back(M_PI / 4);
  }
  return s;
}

StatusOr<Search> ParseSearch(std::string_view text, int64_t layers) {
  const std::string_view line = text.substr(0, text.find('\n'));
  const auto f = KeyValues(line);
  Search s;
  MERIDIAN_ASSIGN_OR_RETURN(std::string round, Field(f, "round", line));
  MERIDIAN_ASSIGN_OR_RETURN(s.round, ParseInt(round, "qaoa-search round"));
  MERIDIAN_ASSIGN_OR_RETURN(std::string center, Field(f, "center", line));
  MERIDIAN_ASSIGN_OR_RETURN(s.center, NumberList(center, "qaoa-search center"));
  MERIDIAN_ASSIGN_OR_RETURN(std::string half, Field(f, "halfwidth", line));
  MERIDIAN_ASSIGN_OR_RETURN(s.halfwidth, NumberList(half, "qaoa-search halfwidth"));
  if (s.center.size() != static_cast<size_t>(2 * layers) || s.halfwidth.size() != s.center.size()) {
    return InvalidArgumentError(fmt::format("the search has {} angles where {} layers take {}", s.center.size(), layers,
                                            2 * layers));
  }
  return s;
}

StatusOr<int64_t> GridArg(const KernelContext& ctx) {
  MERIDIAN_ASSIGN_OR_RETURN(int64_t grid, ArgInt(ctx, "grid", 5, 3, 15));
  if (grid % 2 == 0) return InvalidArgumentError("argument 'grid': an odd number, so the centre is a point of it");
  return grid;
}

}  // namespace

StatusOr<std::string> QaoaEvaluate(const KernelContext& ctx) {
  MERIDIAN_RETURN_IF_ERROR(CheckArgs(ctx, "qaoa-evaluate", {"graph", "layers", "grid"}));
  auto graph_arg = ctx.args.find("graph");
  if (graph_arg == ctx.args.end()) return InvalidArgumentError("qaoa-evaluate needs 'graph', such as '0-1 1-2 2-0'");
  MERIDIAN_ASSIGN_OR_RETURN(Graph g, ParseGraph(graph_arg->second));
  MERIDIAN_ASSIGN_OR_RETURN(int64_t layers, ArgInt(ctx, "layers", 1, 1, 3));
  MERIDIAN_ASSIGN_OR_RETURN(int64_t grid, GridArg(ctx));
  int64_t points = 1;
  for (int64_t k = 0; k < 2 * layers; ++k) points *= grid;
  if (points > 4096) return InvalidArgumentError(fmt::format("{} points a round (grid^(2 layers)); at most 4096", points));
  if (ctx.index >= points) {
    return InvalidArgumentError(fmt::format("copy {} of a grid of {} points: give the task count: {}", ctx.index, points, points));
  }
  if (ctx.inputs.size() > 1) return InvalidArgumentError("qaoa-evaluate takes at most one input: the last search step");
  Search s = FirstSearch(layers);
  if (!ctx.inputs.empty()) {
    if (ctx.inputs[0].substr(0, kSearch.size()) != kSearch) {
      return InvalidArgumentError("input 0: expected the output of qaoa-optimize ('qaoa-search ...')");
    }
    MERIDIAN_ASSIGN_OR_RETURN(s, ParseSearch(ctx.inputs[0], layers));
  }
  // This copy's point: digit a of its index (base grid) places it on axis a.
  std::vector<double> angles(s.center.size());
  int64_t rest = ctx.index;
  for (size_t a = 0; a < angles.size(); ++a) {
    const int64_t digit = rest % grid;
    rest /= grid;
    angles[a] = s.center[a] + s.halfwidth[a] * (2.0 * static_cast<double>(digit) / static_cast<double>(grid - 1) - 1.0);
  }
  const std::vector<double> gammas(angles.begin(), angles.begin() + layers), betas(angles.begin() + layers, angles.end());
  MERIDIAN_ASSIGN_OR_RETURN(Simulated sim, Simulate(ctx, QaoaCircuit(g, gammas, betas)));
  double expectation = 0, likely_p = -1;
  uint64_t likely = 0;
  for (uint64_t i = 0; i < sim.state.size() / 2; ++i) {
    if ((i & 0xFFF) == 0 && ctx.stop.load()) return Status(StatusCode::kCancelled, "stopped");
    const double p = Probability(sim.state, i);
    expectation += p * CutSize(g, i);
    if (p > likely_p + kNoise) {
      likely_p = p;
      likely = i;
    }
  }
  return fmt::format("qaoa-point round={} index={} expectation={:.15f} likely={} likely_cut={} params={} halfwidth={}\n",
                     s.round, ctx.index, expectation, Bits(likely, g.nodes), CutSize(g, likely), Join(angles),
                     Join(s.halfwidth));
}

StatusOr<std::string> QaoaOptimize(const KernelContext& ctx) {
  MERIDIAN_RETURN_IF_ERROR(CheckArgs(ctx, "qaoa-optimize", {"graph", "grid"}));
  MERIDIAN_ASSIGN_OR_RETURN(int64_t grid, GridArg(ctx));
  struct Point {
    int64_t round = 0, index = 0;
    double expectation = 0;
    std::string likely, likely_cut;
    std::vector<double> params, halfwidth;
  };
  std::vector<Point> points;
  for (size_t k = 0; k < ctx.inputs.size(); ++k) {
    const std::string_view line = std::string_view(ctx.inputs[k]).substr(0, ctx.inputs[k].find('\n'));
    if (line.substr(0, kPoint.size()) != kPoint) {
      return InvalidArgumentError(fmt::format("input {}: expected the output of qaoa-evaluate ('qaoa-point ...')", k));
    }
    const auto f = KeyValues(line);
    Point p;
    for (const char* key : {"round", "index", "expectation", "likely", "likely_cut", "params", "halfwidth"}) {
      MERIDIAN_RETURN_IF_ERROR(Field(f, key, line).status().WithPrefix(fmt::format("input {}", k)));
    }
    MERIDIAN_ASSIGN_OR_RETURN(p.round, ParseInt(f.at("round"), "round"));
    MERIDIAN_ASSIGN_OR_RETURN(p.index, ParseInt(f.at("index"), "index"));
    MERIDIAN_ASSIGN_OR_RETURN(p.expectation, ParseDouble(f.at("expectation"), "expectation"));
    MERIDIAN_ASSIGN_OR_RETURN(p.params, NumberList(f.at("params"), "params"));
    MERIDIAN_ASSIGN_OR_RETURN(p.halfwidth, NumberList(f.at("halfwidth"), "halfwidth"));
    p.likely = f.at("likely");
    p.likely_cut = f.at("likely_cut");
    if (!points.empty() && (p.round != points[0].round || p.params.size() != points[0].params.size() ||
                            p.halfwidth != points[0].halfwidth)) {
      return InvalidArgumentError(fmt::format("input {}: a point of another round or grid than input 0", k));
    }
    points.push_back(std::move(p));
  }
  if (points.empty()) return InvalidArgumentError("qaoa-optimize needs the points of a round as its inputs");
  // The best point (ties: the lower index) is the next grid's centre, and the next
  // grid spans one step of this one either side of it.
  const Point& best = *std::min_element(points.begin(), points.end(), [](const Point& a, const Point& b) {
    return a.expectation != b.expectation ? a.expectation > b.expectation : a.index < b.index;
  });
  std::vector<double> half = best.halfwidth;
  for (double& h : half) h *= 2.0 / static_cast<double>(grid - 1);
  std::string out = fmt::format("qaoa-search round={} center={} halfwidth={} expectation={:.15f} likely={} likely_cut={}",
                                best.round + 1, Join(best.params), Join(half), best.expectation, best.likely,
                                best.likely_cut);
  if (auto graph = ctx.args.find("graph"); graph != ctx.args.end()) {
    // The classical answer beside it, by trying every assignment.
    MERIDIAN_ASSIGN_OR_RETURN(Graph g, ParseGraph(graph->second));
    // Up to 2^26 cuts of any number of edges: a cancelled task stops here too.
    int32_t max_cut = 0;
    for (uint64_t a = 0; a < (uint64_t{1} << g.nodes); ++a) {
      if ((a & 0xFFF) == 0 && ctx.stop.load()) return Status(StatusCode::kCancelled, "stopped");
      max_cut = std::max(max_cut, CutSize(g, a));
    }
    out += fmt::format(" max_cut={} edges={}", max_cut, g.edges.size());
  }
  return out + "\n";
}

}  // namespace builtin
}  // namespace meridian::kernels
