#include "kernels/quantum.h"

#include <cmath>
#include <atomic>
#include <complex>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "kernels/generate.h"
#include "kernels/kernel.h"
#include "kernels/ops.h"
#include "kernels/qasm.h"

namespace meridian::kernels {
namespace {

using Amp = std::complex<double>;
constexpr double kR = 0.70710678118654752440;  // 1/sqrt(2)
std::atomic<bool> no_stop{false};

std::string Qasm(int qubits, const std::string& body) {
  return fmt::format("OPENQASM 2.0;\ninclude \"qelib1.inc\";\nqreg q[{}];\n{}", qubits, body);
}

std::vector<Amp> Amplitudes(const std::string& qasm, const Ops& ops = CpuOps()) {
  StatusOr<Circuit> c = ParseQasm(qasm);
  EXPECT_TRUE(c.ok()) << c.status().message();
  if (!c.ok()) return {};
  std::vector<double> state;
  Status s = ops.Simulate(c->qubits, c->gates, state, no_stop);
  EXPECT_TRUE(s.ok()) << s.message();
  std::vector<Amp> out;
  for (size_t i = 0; i < state.size(); i += 2) out.emplace_back(state[i], state[i + 1]);
  return out;
}

void ExpectAmplitudes(const std::vector<Amp>& got, const std::vector<Amp>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i].real(), want[i].real(), 1e-15) << what << " amplitude " << i;
    EXPECT_NEAR(got[i].imag(), want[i].imag(), 1e-15) << what << " amplitude " << i;
  }
}

std::string ParseError(const std::string& qasm) {
  StatusOr<Circuit> c = ParseQasm(qasm);
  return c.ok() ? "ok" : std::string(c.status().message());
}

TEST(QasmTest, SmallCircuitsGiveTheirHandWorkedAmplitudes) {
  const Amp i(0, 1);
  ExpectAmplitudes(Amplitudes(Qasm(1, "h q[0];")), {kR, kR}, "H|0>");
  ExpectAmplitudes(Amplitudes(Qasm(1, "x q[0];\nh q[0];")), {kR, -kR}, "H|1>");
  ExpectAmplitudes(Amplitudes(Qasm(1, "ry(pi/3) q[0];")), {std::sqrt(3.0) / 2, 0.5}, "RY(pi/3)|0>");
  ExpectAmplitudes(Amplitudes(Qasm(1, "h q[0];\nt q[0];")), {kR, 0.5 + 0.5 * i}, "TH|0>");
  ExpectAmplitudes(Amplitudes(Qasm(1, "h q[0];\nrz(pi/2) q[0];")), {0.5 - 0.5 * i, 0.5 + 0.5 * i}, "RZ(pi/2)H|0>");
  ExpectAmplitudes(Amplitudes(Qasm(1, "u3(pi/2, pi/4, pi/8) q[0];")), {kR, 0.5 + 0.5 * i}, "U3|0>");
  ExpectAmplitudes(Amplitudes(Qasm(1, "sx q[0];")), {0.5 + 0.5 * i, 0.5 - 0.5 * i}, "SX|0>");
  // Qubit k is bit k of the amplitude's index.
  ExpectAmplitudes(Amplitudes(Qasm(2, "h q[0];\ncx q[0],q[1];")), {kR, 0, 0, kR}, "Bell");
  ExpectAmplitudes(Amplitudes(Qasm(2, "x q[0];\nswap q[0],q[1];")), {0, 0, 1, 0}, "SWAP|01>");
  ExpectAmplitudes(Amplitudes(Qasm(3, "x q[0];\nx q[1];\nccx q[0],q[1],q[2];")), {0, 0, 0, 0, 0, 0, 0, 1}, "CCX|011>");
  ExpectAmplitudes(Amplitudes(Qasm(2, "h q;\ncz q[0],q[1];")), {0.5, 0.5, 0.5, -0.5}, "CZ on |++>");
  ExpectAmplitudes(Amplitudes(Qasm(2, "x q[1];\nh q[0];\ncu1(pi/2) q[0],q[1];")), {0, 0, kR, kR * i}, "CU1");
  // A definition of one's own, with a parameter in an expression.
  ExpectAmplitudes(Amplitudes(Qasm(2, "gate bell(t) a, b { ry(2*t) a; cx a, b; }\nbell(pi/4) q[0], q[1];")), {kR, 0, 0, kR},
                   "a defined gate");
  // Several registers: qubits in declaration order.
  ExpectAmplitudes(Amplitudes("OPENQASM 2.0;\nqreg a[1];\nqreg b[1];\nU(pi, 0, pi) b[0];\n"), {0, 0, 1, 0}, "two qregs");
}

TEST(QasmTest, GhzGivesHalfAndHalfAndSamplesAsItsDraws) {
  const std::string ghz = Qasm(5, "creg c[5];\nh q[0];\ncx q[0],q[1];\ncx q[1],q[2];\ncx q[2],q[3];\ncx q[3],q[4];\n"
                                  "measure q -> c;\n");
  const KernelInfo* k = FindKernel("qsim");
  ASSERT_NE(k, nullptr);
  std::map<std::string, std::string> args = {{"circuit", ghz}};
  std::vector<std::string> none;
  StatusOr<std::string> out = k->run({args, none, 0, no_stop});
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(*out, "qsim qubits=5 clbits=5 gates=5 fused=5 output=probabilities\n00000 0.5\n11111 0.5\n");
  // 1,000 shots of seed 3: each draw u below 1/2 is 00000.
  args["output"] = "counts";
  args["shots"] = "1000";
  args["seed"] = "3";
  out = k->run({args, none, 0, no_stop});
  ASSERT_TRUE(out.ok()) << out.status().message();
  int64_t zeros = 0;
  for (uint64_t s = 0; s < 1000; ++s) zeros += gen::Unit(3, s) < 0.5;
  const std::string first = zeros >= 500 ? "00000" : "11111", second = zeros >= 500 ? "11111" : "00000";
  EXPECT_EQ(*out, fmt::format("qsim qubits=5 clbits=5 gates=5 fused=5 output=counts\n{} {}\n{} {}\n", first,
                              std::max(zeros, 1000 - zeros), second, std::min(zeros, 1000 - zeros)));
  // Measuring two qubits into a 2-bit register: the marginal.
  std::map<std::string, std::string> marginal = {
      {"circuit", Qasm(3, "creg c[2];\nh q[0];\ncx q[0],q[2];\nmeasure q[2] -> c[0];\nmeasure q[1] -> c[1];\n")}};
  out = k->run({marginal, none, 0, no_stop});
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(*out, "qsim qubits=3 clbits=2 gates=2 fused=2 output=probabilities\n00 0.5\n01 0.5\n");
}

TEST(QasmTest, QftOfABasisStateHasTheFourierPhases) {
  // The textbook QFT on 4 qubits (most significant first, then the swaps) of |5>:
  // amplitude y is exp(2 pi i 5 y / 16) / 4.
  std::string body = "x q[0];\nx q[2];\n";
  const int n = 4;
  for (int j = n - 1; j >= 0; --j) {
    body += fmt::format("h q[{}];\n", j);
    for (int k = j - 1; k >= 0; --k) body += fmt::format("cu1(pi/{}) q[{}],q[{}];\n", 1 << (j - k), k, j);
  }
  for (int i = 0; i < n / 2; ++i) body += fmt::format("swap q[{}],q[{}];\n", i, n - 1 - i);
  std::vector<Amp> want;
  for (int y = 0; y < 16; ++y) want.push_back(std::polar(0.25, 2 * M_PI * 5 * y / 16));
  std::vector<Amp> got = Amplitudes(Qasm(n, body));
  ASSERT_EQ(got.size(), 16u);
  for (int y = 0; y < 16; ++y) {
    EXPECT_NEAR(got[y].real(), want[y].real(), 1e-14) << y;
    EXPECT_NEAR(got[y].imag(), want[y].imag(), 1e-14) << y;
  }
}

TEST(QasmTest, GroverFindsTheMarkedStateWithItsKnownProbability) {
  // Three qubits, |101> marked, two iterations: sin^2(5 asin(1/sqrt 8)) = 121/128; the
  // other seven outcomes 1/128 each.
  const std::string ccz = "h q[2];\nccx q[0],q[1],q[2];\nh q[2];\n";
  const std::string oracle = "x q[1];\n" + ccz + "x q[1];\n";
  const std::string diffusion = "h q;\nx q;\n" + ccz + "x q;\nh q;\n";
  const std::string grover = Qasm(3, "creg c[3];\nh q;\n" + oracle + diffusion + oracle + diffusion + "measure q -> c;\n");
  const KernelInfo* k = FindKernel("qsim");
  std::map<std::string, std::string> args = {{"top", "2"}};
  std::vector<std::string> in = {grover};
  StatusOr<std::string> out = k->run({args, in, 0, no_stop});
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(*out, "qsim qubits=3 clbits=3 gates=43 fused=19 output=probabilities\n101 0.9453125\n000 0.0078125\n");
  std::vector<Amp> amps = Amplitudes(grover);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(std::norm(amps[i]), i == 5 ? 121.0 / 128 : 1.0 / 128, 1e-14) << i;
}

TEST(QsimCpuTest, BlocksAndThreadsGiveTheBitsOfOneGateAtATime) {
  // 16 qubits: threads, and runs of gates applied tile by tile, with controls and
  // targets on either side of the tiles' low qubits.
  StatusOr<Circuit> c = ParseQasm(LayeredCircuit(16, 6, 5) +
                                  "ccx q[15],q[9],q[2];\ncswap q[3],q[14],q[7];\ncu1(0.3) q[12],q[1];\ncry(1.1) q[0],q[13];\n"
                                  "h q;\ncx q[8],q[7];\nrzz(0.7) q[10],q[11];\n");
  ASSERT_TRUE(c.ok()) << c.status().message();
  std::vector<double> fast;
  ASSERT_TRUE(CpuOps().Simulate(16, c->gates, fast, no_stop).ok());
  std::vector<double> plain(2 << 16, 0.0);
  plain[0] = 1;
  for (const QGate& g : c->gates) {
    for (uint64_t p = 0; p < (1u << 15); ++p) qsim::ApplyPair(plain.data(), p, g);
  }
  EXPECT_TRUE(fast == plain) << "not bit-identical";
  double norm = 0;
  for (double x : fast) norm += x * x;
  EXPECT_NEAR(norm, 1.0, 1e-12);
  // Fusing single-qubit runs changes the gate count, not the state (to rounding).
  std::vector<QGate> fused = FuseGates(c->gates);
  EXPECT_LT(fused.size(), c->gates.size());
  std::vector<double> from_fused;
  ASSERT_TRUE(CpuOps().Simulate(16, fused, from_fused, no_stop).ok());
  for (size_t i = 0; i < plain.size(); ++i) ASSERT_NEAR(from_fused[i], plain[i], 1e-13) << i;
}

// A parameter is read by a recursive reader: its nesting is bounded (256), so a
// circuit of a million '(' (or signs, or powers) is refused with one error. Before,
// it ran the thread out of stack: the agent running the task died (SIGSEGV), and the
// task, placed again, took the next node down.
TEST(QasmTest, AParameterNestedPastItsBoundIsRefusedNotRecursedInto) {
  auto nested = [](int n) { return Qasm(1, "rz(" + std::string(n, '(') + "pi" + std::string(n, ')') + ") q[0];"); };
  StatusOr<Circuit> deepest = ParseQasm(nested(256));
  ASSERT_TRUE(deepest.ok()) << deepest.status().message();
  EXPECT_EQ(deepest->gates.size(), 1u);
  const std::string why = "a parameter nests deeper than 256 (parentheses, signs and powers)";
  EXPECT_EQ(ParseError(nested(257)), "line 4, column 260: " + why);
  EXPECT_EQ(ParseError(nested(1'000'000)), "line 4, column 260: " + why);
  EXPECT_EQ(ParseError(Qasm(1, "rz(" + std::string(1'000'000, '-') + "pi) q[0];")), "line 4, column 260: " + why);
  std::string powers;
  for (int i = 0; i < 500'000; ++i) powers += "1^";
  EXPECT_EQ(ParseError(Qasm(1, "rz(" + powers + "1) q[0];")), "line 4, column 517: " + why);
  std::string calls;
  for (int i = 0; i < 300'000; ++i) calls += "sin(";
  EXPECT_EQ(ParseError(Qasm(1, "rz(" + calls + "1" + std::string(300'000, ')') + ") q[0];")),
            "line 4, column 1028: " + why);
}

TEST(QasmTest, BadCircuitsGetOneErrorNamingLineAndColumn) {
  EXPECT_EQ(ParseError("qreg q[1];"), "line 1, column 1: a circuit starts with 'OPENQASM 2.0;'");
  EXPECT_EQ(ParseError("OPENQASM 3.0;"), "line 1, column 10: OpenQASM 3.0 is not read; only 2.0");
  EXPECT_EQ(ParseError(Qasm(2, "foo q[0];")), "line 4, column 1: unknown gate 'foo'");
  EXPECT_EQ(ParseError(Qasm(2, "h q[2];")), "line 4, column 3: q[2] is outside its 2 bits");
  EXPECT_EQ(ParseError(Qasm(2, "cx q[0];")), "line 4, column 1: 'cx' acts on 2 qubits, not 1");
  EXPECT_EQ(ParseError(Qasm(2, "cx q[1],q[1];")), "line 4, column 1: 'cx' is given the same qubit twice");
  EXPECT_EQ(ParseError(Qasm(2, "rx q[0];")), "line 4, column 1: 'rx' takes 1 parameter, not 0");
  EXPECT_EQ(ParseError(Qasm(2, "rx(pi/ q[0];")), "line 4, column 3: this '(' is not closed");
  EXPECT_EQ(ParseError(Qasm(2, "rx(tau) q[0];")), "line 4, column 4: unknown parameter 'tau'");
  EXPECT_EQ(ParseError(Qasm(1, "creg c[1];\nmeasure q[0] -> c[0];\nh q[0];")),
            "line 6, column 1: 'h' acts on a qubit already measured: measurement must come after every gate");
  EXPECT_EQ(ParseError(Qasm(1, "reset q[0];")), "line 4, column 1: 'reset' is not supported by this simulator");
  EXPECT_EQ(ParseError("OPENQASM 2.0;\nqreg q[41];"), "line 2, column 6: qreg 'q' of 41: a circuit has 1 to 40 qubits in all");
  EXPECT_EQ(ParseError("OPENQASM 2.0;\ninclude \"mine.inc\";"),
            "line 2, column 9: only \"qelib1.inc\" may be included (its gates are built in)");
  EXPECT_EQ(ParseError("OPENQASM 2.0;\ncreg c[1];"), "the circuit declares no qreg");
  EXPECT_EQ(ParseError(Qasm(1, "gate g a { g a; }\ng q[0];")),
            "line 4, column 12: gate definitions nest deeper than 64");
  EXPECT_EQ(ParseError(Qasm(1, "h q[0]")), "line 4, column 7: expected ',' or ';', found the end");
  // And through the kernel: which part of the task is wrong.
  const KernelInfo* k = FindKernel("qsim");
  std::map<std::string, std::string> args = {{"circuit", Qasm(1, "hh q[0];")}};
  std::vector<std::string> none;
  EXPECT_EQ(k->run({args, none, 0, no_stop}).status().message(), "circuit: line 4, column 1: unknown gate 'hh'");
  args = {{"circuit", Qasm(31, "h q;")}};
  EXPECT_EQ(k->run({args, none, 0, no_stop}).status().message(),
            "31 qubits: the CPU simulates 1 to 30 (16 bytes an amplitude); ask for a GPU");
  std::map<std::string, std::string> no_circuit;
  EXPECT_EQ(k->run({no_circuit, none, 0, no_stop}).status().message(),
            "qsim needs its circuit (OpenQASM 2.0) in the argument 'circuit' or as its one input, not both");
}

TEST(QaoaTest, TheHybridLoopConvergesToTheKnownOptimum) {
  // MaxCut on a house (a square and a roof): the best cut is 5 edges of 6. For one QAOA
  // layer the best expected cut is 4.110068884448432 (found by a dense grid search,
  // refined, in numpy), at gamma 0.649, beta 0.354, where the most likely outcome is
  // 00101 (nodes 0 and 2 on one side), a best cut.
  const std::string graph = "0-1 1-2 2-3 3-0 2-4 3-4";
  const KernelInfo* evaluate = FindKernel("qaoa-evaluate");
  const KernelInfo* optimize = FindKernel("qaoa-optimize");
  ASSERT_NE(evaluate, nullptr);
  ASSERT_NE(optimize, nullptr);
  std::map<std::string, std::string> eval_args = {{"graph", graph}, {"grid", "5"}};
  std::map<std::string, std::string> opt_args = {{"graph", graph}, {"grid", "5"}};
  std::vector<std::string> search;  // the last optimiser's output, as the next round's input
  std::string last;
  double previous = -1;
  for (int round = 1; round <= 10; ++round) {
    std::vector<std::string> points;
    for (uint32_t i = 0; i < 25; ++i) {
      StatusOr<std::string> p = evaluate->run({eval_args, search, i, no_stop});
      ASSERT_TRUE(p.ok()) << p.status().message();
      points.push_back(*p);
    }
    StatusOr<std::string> next = optimize->run({opt_args, points, 0, no_stop});
    ASSERT_TRUE(next.ok()) << next.status().message();
    last = *next;
    search = {last};
    const size_t at = last.find("expectation=");
    const double e = std::stod(last.substr(at + 12));
    EXPECT_GE(e, previous) << "round " << round << " got worse: " << last;
    previous = e;
  }
  EXPECT_NEAR(previous, 4.110068884448432, 1e-5) << last;
  EXPECT_NE(last.find("round=11 "), std::string::npos) << last;
  EXPECT_NE(last.find(" likely=00101 likely_cut=5 max_cut=5 edges=6\n"), std::string::npos) << last;
  // Bad input: a point out of the grid, a graph that is not one, inputs of another kind.
  EXPECT_EQ(evaluate->run({eval_args, {}, 25, no_stop}).status().message(),
            "copy 25 of a grid of 25 points: give the task count: 25");
  std::map<std::string, std::string> bad_graph = {{"graph", "0-0"}};
  EXPECT_EQ(evaluate->run({bad_graph, {}, 0, no_stop}).status().message(),
            "graph: edge '0-0': nodes are 0 to 25, two different ones");
  std::vector<std::string> junk = {"hello"};
  EXPECT_EQ(optimize->run({opt_args, junk, 0, no_stop}).status().message(),
            "input 0: expected the output of qaoa-evaluate ('qaoa-point ...')");
}

// qaoa-optimize's classical answer tries every cut: 2^26 of them for a graph of 26
// nodes, each over every edge the task gave (325 here, and nothing bounds repeats). It
// did not look at its task's stop flag, so a cancelled or timed-out task ran on holding
// its agent's thread (267 s for this test in the dev build); now it stops within 4,096
// cuts.
TEST(QaoaTest, TheClassicalAnswerStopsWhenItsTaskIsStopped) {
  std::string graph;
  for (int a = 0; a < 26; ++a) {
    for (int b = a + 1; b < 26; ++b) graph += fmt::format("{}{}-{}", graph.empty() ? "" : " ", a, b);
  }
  const std::map<std::string, std::string> args = {{"graph", graph}, {"grid", "3"}};
  const std::vector<std::string> points = {
      "qaoa-point round=1 index=0 expectation=1.5 likely=01 likely_cut=1 params=0.1,0.2 halfwidth=0.5,0.5\n"};
  std::atomic<bool> stopped{true};
  StatusOr<std::string> out = FindKernel("qaoa-optimize")->run({args, points, 0, stopped});
  ASSERT_FALSE(out.ok()) << "ran to the end although stopped: " << out->substr(0, 200);
  EXPECT_EQ(out.status().code(), StatusCode::kCancelled) << out.status().message();
}

// Where a CUDA device is found (skipped elsewhere, saying why): the GPU's state is the
// CPU's, bit for bit (neither fuses a multiply-add; both apply the same gates in order).
TEST(GpuQsimTest, TheGpuStateIsTheCpuStateBitForBit) {
  StatusOr<const Ops*> gpu = GpuOps(0);
  if (!gpu.ok()) GTEST_SKIP() << gpu.status().message();
  for (int qubits : {1, 5, 14, 20}) {
    StatusOr<Circuit> c = ParseQasm(LayeredCircuit(qubits, 5, 11));
    ASSERT_TRUE(c.ok());
    std::vector<QGate> fused = FuseGates(c->gates);
    std::vector<double> on_gpu, on_cpu;
    Status s = (*gpu)->Simulate(qubits, fused, on_gpu, no_stop);
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_TRUE(CpuOps().Simulate(qubits, fused, on_cpu, no_stop).ok());
    EXPECT_TRUE(on_gpu == on_cpu) << qubits << " qubits";
  }
  const KernelInfo* k = FindKernel("qsim");
  std::map<std::string, std::string> args = {{"circuit", LayeredCircuit(12, 4, 2)}, {"output", "amplitudes"}, {"top", "100"}};
  std::vector<std::string> none;
  StatusOr<std::string> cpu = k->run({args, none, 0, no_stop, -1});
  StatusOr<std::string> on_gpu = k->run({args, none, 0, no_stop, 0});
  ASSERT_TRUE(cpu.ok() && on_gpu.ok()) << on_gpu.status().message();
  EXPECT_EQ(*on_gpu, *cpu);
}

}  // namespace
}  // namespace meridian::kernels
