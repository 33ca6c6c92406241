#include "kernels/qasm.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <string>

#include <fmt/format.h>

namespace meridian::kernels {
namespace {

// ---- tokens ----

struct Token {
  enum Kind { kIdent, kNumber, kString, kSymbol, kEnd } kind = kEnd;
  std::string text;
  int line = 1, col = 1;
};

Status At(const Token& t, std::string_view what) {
  return InvalidArgumentError(fmt::format("line {}, column {}: {}", t.line, t.col, what));
}

StatusOr<std::vector<Token>> Tokenize(std::string_view s) {
  std::vector<Token> out;
  int line = 1, col = 1;
  size_t i = 0;
  auto advance = [&](size_t n) {
    for (size_t k = 0; k < n; ++k, ++i) {
      if (s[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
  };
  while (i < s.size()) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      advance(1);
      continue;
    }
    if (c == '/' && i + 1 < s.size() && s[i + 1] == '/') {
      while (i < s.size() && s[i] != '\n') advance(1);
      continue;
    }
    Token t;
    t.line = line;
    t.col = col;
    size_t n = 1;
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      while (i + n < s.size() && (std::isalnum(static_cast<unsigned char>(s[i + n])) || s[i + n] == '_')) ++n;
      t.kind = Token::kIdent;
    } else if (std::isdigit(static_cast<unsigned char>(c)) || (c == '.' && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1])))) {
      while (i + n < s.size() && (std::isdigit(static_cast<unsigned char>(s[i + n])) || s[i + n] == '.')) ++n;
      if (i + n < s.size() && (s[i + n] == 'e' || s[i + n] == 'E')) {
        size_t k = n + 1;
        if (i + k < s.size() && (s[i + k] == '+' || s[i + k] == '-')) ++k;
        if (i + k < s.size() && std::isdigit(static_cast<unsigned char>(s[i + k]))) {
          n = k;
          while (i + n < s.size() && std::isdigit(static_cast<unsigned char>(s[i + n]))) ++n;
        }
      }
      t.kind = Token::kNumber;
    } else if (c == '"') {
      while (i + n < s.size() && s[i + n] != '"' && s[i + n] != '\n') ++n;
      if (i + n >= s.size() || s[i + n] != '"') return InvalidArgumentError(fmt::format("line {}, column {}: an unterminated string", line, col));
      ++n;
      t.kind = Token::kString;
    } else if ((c == '-' && i + 1 < s.size() && s[i + 1] == '>') || (c == '=' && i + 1 < s.size() && s[i + 1] == '=')) {
      n = 2;
      t.kind = Token::kSymbol;
    } else if (std::string_view(";,()[]{}+-*/^").find(c) != std::string_view::npos) {
      t.kind = Token::kSymbol;
    } else {
      return InvalidArgumentError(fmt::format("line {}, column {}: unexpected character '{}'", line, col, c));
    }
    t.text = std::string(s.substr(i, n));
    advance(n);
    out.push_back(std::move(t));
  }
  Token end;
  end.line = line;
  end.col = col;
  out.push_back(end);
  return out;
}

// ---- matrices ----

struct Cx {
  double re = 0, im = 0;
};
Cx Mul(Cx a, Cx b) { return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re}; }
Cx Add(Cx a, Cx b) { return {a.re + b.re, a.im + b.im}; }
Cx Phase(double t) { return {std::cos(t), std::sin(t)}; }

QGate Make(Cx m00, Cx m01, Cx m10, Cx m11, uint32_t target, uint64_t controls) {
  QGate g{{m00.re, m00.im, m01.re, m01.im, m10.re, m10.im, m11.re, m11.im}, controls, target, 0};
  g.diagonal = m01.re == 0 && m01.im == 0 && m10.re == 0 && m10.im == 0;
  return g;
}

// The 2x2 matrices of the one-qubit gates, by name; params already checked in number.
struct Matrix {
  Cx m00, m01, m10, m11;
};

Matrix U3(double theta, double phi, double lambda) {
  const double c = std::cos(theta / 2), s = std::sin(theta / 2);
  const Cx el = Phase(lambda), ep = Phase(phi), epl = Phase(phi + lambda);
  return {{c, 0}, {-el.re * s, -el.im * s}, {ep.re * s, ep.im * s}, {epl.re * c, epl.im * c}};
}

bool OneQubitMatrix(std::string_view name, const std::vector<double>& p, Matrix* m) {
  const double r = M_SQRT1_2;
  if (name == "id") *m = {{1, 0}, {0, 0}, {0, 0}, {1, 0}};
  else if (name == "x") *m = {{0, 0}, {1, 0}, {1, 0}, {0, 0}};
  else if (name == "y") *m = {{0, 0}, {0, -1}, {0, 1}, {0, 0}};
  else if (name == "z") *m = {{1, 0}, {0, 0}, {0, 0}, {-1, 0}};
  else if (name == "h") *m = {{r, 0}, {r, 0}, {r, 0}, {-r, 0}};
  else if (name == "s") *m = {{1, 0}, {0, 0}, {0, 0}, {0, 1}};
  else if (name == "sdg") *m = {{1, 0}, {0, 0}, {0, 0}, {0, -1}};
  else if (name == "t") *m = {{1, 0}, {0, 0}, {0, 0}, {r, r}};
  else if (name == "tdg") *m = {{1, 0}, {0, 0}, {0, 0}, {r, -r}};
  else if (name == "sx") *m = {{0.5, 0.5}, {0.5, -0.5}, {0.5, -0.5}, {0.5, 0.5}};
  else if (name == "sxdg") *m = {{0.5, -0.5}, {0.5, 0.5}, {0.5, 0.5}, {0.5, -0.5}};
  else if (name == "rx") *m = {{std::cos(p[0] / 2), 0}, {0, -std::sin(p[0] / 2)}, {0, -std::sin(p[0] / 2)}, {std::cos(p[0] / 2), 0}};
  else if (name == "ry") *m = {{std::cos(p[0] / 2), 0}, {-std::sin(p[0] / 2), 0}, {std::sin(p[0] / 2), 0}, {std::cos(p[0] / 2), 0}};
  else if (name == "rz") *m = {Phase(-p[0] / 2), {0, 0}, {0, 0}, Phase(p[0] / 2)};
  else if (name == "u1" || name == "p") *m = {{1, 0}, {0, 0}, {0, 0}, Phase(p[0])};
  else if (name == "u2") *m = U3(M_PI / 2, p[0], p[1]);
  else if (name == "u3" || name == "u" || name == "U") *m = U3(p[0], p[1], p[2]);
  else return false;
  return true;
}

struct Builtin {
  int params;
  int qubits;
};

const std::map<std::string, Builtin, std::less<>>& Builtins() {
  static const std::map<std::string, Builtin, std::less<>> table = {
      {"U", {3, 1}},    {"u3", {3, 1}},  {"u", {3, 1}},    {"u2", {2, 1}},   {"u1", {1, 1}},  {"p", {1, 1}},
      {"id", {0, 1}},   {"x", {0, 1}},   {"y", {0, 1}},    {"z", {0, 1}},    {"h", {0, 1}},   {"s", {0, 1}},
      {"sdg", {0, 1}},  {"t", {0, 1}},   {"tdg", {0, 1}},  {"sx", {0, 1}},   {"sxdg", {0, 1}}, {"rx", {1, 1}},
      {"ry", {1, 1}},   {"rz", {1, 1}},  {"CX", {0, 2}},   {"cx", {0, 2}},   {"cy", {0, 2}},  {"cz", {0, 2}},
      {"ch", {0, 2}},   {"swap", {0, 2}}, {"ccx", {0, 3}}, {"cswap", {0, 3}}, {"crx", {1, 2}}, {"cry", {1, 2}},
      {"crz", {1, 2}},  {"cu1", {1, 2}}, {"cp", {1, 2}},   {"cu3", {3, 2}},  {"rzz", {1, 2}},
  };
  return table;
}

uint64_t Bit(int32_t q) { return uint64_t{1} << q; }

// Appends the gates of builtin `name` on qubits q.
void EmitBuiltin(std::string_view name, const std::vector<double>& p, const std::vector<int32_t>& q,
                 std::vector<QGate>& out) {
  Matrix m;
  if (OneQubitMatrix(name, p, &m)) {
    out.push_back(Make(m.m00, m.m01, m.m10, m.m11, q[0], 0));
    return;
  }
  auto controlled = [&](std::string_view one, const std::vector<double>& params, int32_t control, int32_t target) {
    Matrix c;
    OneQubitMatrix(one, params, &c);
    out.push_back(Make(c.m00, c.m01, c.m10, c.m11, target, Bit(control)));
  };
  if (name == "CX" || name == "cx") return controlled("x", {}, q[0], q[1]);
  if (name == "cy") return controlled("y", {}, q[0], q[1]);
  if (name == "cz") return controlled("z", {}, q[0], q[1]);
  if (name == "ch") return controlled("h", {}, q[0], q[1]);
  if (name == "crx") return controlled("rx", p, q[0], q[1]);
  if (name == "cry") return controlled("ry", p, q[0], q[1]);
  if (name == "crz") return controlled("rz", p, q[0], q[1]);
  if (name == "cu1" || name == "cp") return controlled("p", p, q[0], q[1]);
  if (name == "cu3") return controlled("u3", p, q[0], q[1]);
  if (name == "rzz") {
    controlled("x", {}, q[0], q[1]);
    EmitBuiltin("rz", p, {q[1]}, out);
    return controlled("x", {}, q[0], q[1]);
  }
  if (name == "swap") {
    controlled("x", {}, q[0], q[1]);
    controlled("x", {}, q[1], q[0]);
    return controlled("x", {}, q[0], q[1]);
  }
  Matrix x;
  OneQubitMatrix("x", {}, &x);
  if (name == "ccx") {
    out.push_back(Make(x.m00, x.m01, x.m10, x.m11, q[2], Bit(q[0]) | Bit(q[1])));
    return;
  }
  if (name == "cswap") {
    controlled("x", {}, q[2], q[1]);
    out.push_back(Make(x.m00, x.m01, x.m10, x.m11, q[2], Bit(q[0]) | Bit(q[1])));
    return controlled("x", {}, q[2], q[1]);
  }
}

// ---- the parser ----

struct Register {
  std::string name;
  int32_t offset = 0;
  int32_t size = 0;
};

struct Call {  // a gate application inside a definition
  Token at;
  std::string name;
  std::vector<std::vector<Token>> params;  // expressions, evaluated at expansion
  std::vector<std::string> args;
};

struct Definition {
  std::vector<std::string> params;
  std::vector<std::string> qargs;
  std::vector<Call> body;
};

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  StatusOr<Circuit> Run() {
    MERIDIAN_RETURN_IF_ERROR(Header());
    while (Peek().kind != Token::kEnd) MERIDIAN_RETURN_IF_ERROR(Statement());
    return std::move(c_);
  }

 private:
  const Token& Peek(size_t ahead = 0) const { return t_[std::min(pos_ + ahead, t_.size() - 1)]; }
  const Token& Next() { return t_[std::min(pos_++, t_.size() - 1)]; }
  bool Is(std::string_view text) const { return Peek().kind != Token::kString && Peek().text == text; }
  Status Expect(std::string_view text) {
    if (!Is(text)) return At(Peek(), fmt::format("expected '{}', found {}", text, Describe(Peek())));
    Next();
    return OkStatus();
  }
  static std::string Describe(const Token& t) { return t.kind == Token::kEnd ? "the end" : "'" + t.text + "'"; }
  StatusOr<std::string> Ident() {
    if (Peek().kind != Token::kIdent) return At(Peek(), fmt::format("expected a name, found {}", Describe(Peek())));
    return Next().text;
  }
  StatusOr<int64_t> Integer() {
    const Token& t = Next();
    if (t.kind != Token::kNumber || t.text.find_first_not_of("0123456789") != std::string::npos || t.text.size() > 9) {
      return At(t, fmt::format("expected a whole number, found {}", Describe(t)));
    }
    return std::stoll(t.text);
  }

  Status Header() {
    if (!Is("OPENQASM")) return At(Peek(), "a circuit starts with 'OPENQASM 2.0;'");
    Next();
    const Token& v = Next();
    if (v.text != "2.0" && v.text != "2") return At(v, fmt::format("OpenQASM {} is not read; only 2.0", v.text));
    return Expect(";");
  }

  Status Statement() {
    const Token& at = Peek();
    if (Is("include")) {
      Next();
      const Token& f = Next();
      if (f.kind != Token::kString || f.text != "\"qelib1.inc\"") {
        return At(f, "only \"qelib1.inc\" may be included (its gates are built in)");
      }
      return Expect(";");
    }
    if (Is("qreg") || Is("creg")) return Declare(Next().text == "qreg");
    if (Is("gate")) return Define();
    if (Is("measure")) return Measure();
    if (Is("barrier")) {
      while (!Is(";") && Peek().kind != Token::kEnd) Next();
      return Expect(";");
    }
    if (Is("opaque") || Is("reset") || Is("if")) {
      return At(at, fmt::format("'{}' is not supported by this simulator", at.text));
    }
    return Apply();
  }

  Status Declare(bool quantum) {
    const Token& at = Peek();
    MERIDIAN_ASSIGN_OR_RETURN(std::string name, Ident());
    if (FindRegister(name) != nullptr) return At(at, fmt::format("register '{}' is declared twice", name));
    MERIDIAN_RETURN_IF_ERROR(Expect("["));
    MERIDIAN_ASSIGN_OR_RETURN(int64_t size, Integer());
    MERIDIAN_RETURN_IF_ERROR(Expect("]"));
    MERIDIAN_RETURN_IF_ERROR(Expect(";"));
    int32_t& total = quantum ? c_.qubits : c_.clbits;
    if (size < 1 || total + size > kMaxQasmQubits) {
      return At(at, fmt::format("{} '{}' of {}: a circuit has 1 to {} {} in all", quantum ? "qreg" : "creg", name, size,
                                kMaxQasmQubits, quantum ? "qubits" : "bits"));
    }
    (quantum ? qregs_ : cregs_).push_back({name, total, static_cast<int32_t>(size)});
    total += static_cast<int32_t>(size);
    return OkStatus();
  }

  const Register* FindRegister(std::string_view name) const {
    for (const auto* list : {&qregs_, &cregs_}) {
      for (const Register& r : *list) {
        if (r.name == name) return &r;
      }
    }
    return nullptr;
  }

  // An argument: a register (every bit of it) or one element; the bits, in order.
  StatusOr<std::vector<int32_t>> Argument(bool quantum) {
    const Token& at = Peek();
    MERIDIAN_ASSIGN_OR_RETURN(std::string name, Ident());
    const Register* reg = nullptr;
    for (const Register& r : quantum ? qregs_ : cregs_) {
      if (r.name == name) reg = &r;
    }
    if (reg == nullptr) return At(at, fmt::format("no {} named '{}'", quantum ? "qreg" : "creg", name));
    if (!Is("[")) {
      std::vector<int32_t> all;
      for (int32_t k = 0; k < reg->size; ++k) all.push_back(reg->offset + k);
      return all;
    }
    Next();
    MERIDIAN_ASSIGN_OR_RETURN(int64_t index, Integer());
    MERIDIAN_RETURN_IF_ERROR(Expect("]"));
    if (index >= reg->size) return At(at, fmt::format("{}[{}] is outside its {} bits", name, index, reg->size));
    return std::vector<int32_t>{reg->offset + static_cast<int32_t>(index)};
  }

  Status Measure() {
    const Token& at = Next();
    MERIDIAN_ASSIGN_OR_RETURN(std::vector<int32_t> q, Argument(true));
    MERIDIAN_RETURN_IF_ERROR(Expect("->"));
    MERIDIAN_ASSIGN_OR_RETURN(std::vector<int32_t> c, Argument(false));
    MERIDIAN_RETURN_IF_ERROR(Expect(";"));
    if (q.size() != c.size()) return At(at, fmt::format("measure: {} qubits into {} bits", q.size(), c.size()));
    for (size_t k = 0; k < q.size(); ++k) {
      measured_.insert(q[k]);
      c_.measures.emplace_back(q[k], c[k]);
    }
    return OkStatus();
  }

  // Tokens of one expression, up to a ',' or ')' at depth zero.
  StatusOr<std::vector<Token>> ExpressionTokens() {
    std::vector<Token> out;
    int depth = 0;
    while (Peek().kind != Token::kEnd) {
      if (depth == 0 && (Is(",") || Is(")"))) break;
      if (Is("(")) ++depth;
      if (Is(")")) --depth;
      if (Is(";")) break;
      out.push_back(Next());
    }
    if (out.empty()) return At(Peek(), "expected a parameter");
    return out;
  }

  StatusOr<std::vector<std::vector<Token>>> ParamList() {
    std::vector<std::vector<Token>> out;
    if (!Is("(")) return out;
    const Token open = Next();
    if (Is(")")) {
      Next();
      return out;
    }
    while (true) {
      MERIDIAN_ASSIGN_OR_RETURN(std::vector<Token> e, ExpressionTokens());
      out.push_back(std::move(e));
      if (Is(")")) break;
      if (!Is(",")) return At(open, "this '(' is not closed");
      Next();
    }
    Next();
    return out;
  }

  Status Define() {
    Next();
    const Token& at = Peek();
    MERIDIAN_ASSIGN_OR_RETURN(std::string name, Ident());
    if (Builtins().count(name) || defs_.count(name)) return At(at, fmt::format("gate '{}' is defined twice", name));
    Definition d;
    if (Is("(")) {
      Next();
      while (!Is(")")) {
        MERIDIAN_ASSIGN_OR_RETURN(std::string p, Ident());
        d.params.push_back(p);
        if (!Is(")")) MERIDIAN_RETURN_IF_ERROR(Expect(","));
      }
      Next();
    }
    while (!Is("{")) {
      MERIDIAN_ASSIGN_OR_RETURN(std::string q, Ident());
      d.qargs.push_back(q);
      if (!Is("{")) MERIDIAN_RETURN_IF_ERROR(Expect(","));
    }
    if (d.qargs.empty()) return At(at, fmt::format("gate '{}' has no qubits", name));
    Next();
    while (!Is("}")) {
      if (Peek().kind == Token::kEnd) return At(Peek(), fmt::format("gate '{}' has no closing '}}'", name));
      if (Is("barrier")) {
        while (!Is(";") && Peek().kind != Token::kEnd) Next();
        MERIDIAN_RETURN_IF_ERROR(Expect(";"));
        continue;
      }
      Call call;
      call.at = Peek();
      MERIDIAN_ASSIGN_OR_RETURN(call.name, Ident());
      MERIDIAN_ASSIGN_OR_RETURN(call.params, ParamList());
      while (!Is(";")) {
        const Token& a = Peek();
        MERIDIAN_ASSIGN_OR_RETURN(std::string q, Ident());
        if (std::find(d.qargs.begin(), d.qargs.end(), q) == d.qargs.end()) {
          return At(a, fmt::format("'{}' is not a qubit of gate '{}'", q, name));
        }
        call.args.push_back(q);
        if (!Is(";")) MERIDIAN_RETURN_IF_ERROR(Expect(","));
      }
      Next();
      d.body.push_back(std::move(call));
    }
    Next();
    defs_.emplace(name, std::move(d));
    return OkStatus();
  }

  Status Apply() {
    const Token at = Peek();
    MERIDIAN_ASSIGN_OR_RETURN(std::string name, Ident());
    MERIDIAN_ASSIGN_OR_RETURN(std::vector<std::vector<Token>> param_tokens, ParamList());
    std::vector<double> params;
    for (const std::vector<Token>& e : param_tokens) {
      MERIDIAN_ASSIGN_OR_RETURN(double v, Evaluate(e, {}));
      params.push_back(v);
    }
    std::vector<std::vector<int32_t>> args;
    while (!Is(";")) {
      if (Peek().kind == Token::kEnd) return Expect(";");
      MERIDIAN_ASSIGN_OR_RETURN(std::vector<int32_t> a, Argument(true));
      args.push_back(std::move(a));
      if (Is(";")) break;
      if (!Is(",")) return At(Peek(), fmt::format("expected ',' or ';', found {}", Describe(Peek())));
      Next();
    }
    Next();
    // A register argument applies the gate to each of its qubits in turn (with the
    // single qubits repeated); registers given together must be the same size.
    size_t times = 1;
    for (const auto& a : args) {
      if (a.size() == 1) continue;
      if (times != 1 && a.size() != times) return At(at, "registers of different sizes in one gate");
      times = a.size();
    }
    for (size_t k = 0; k < times; ++k) {
      std::vector<int32_t> q;
      for (const auto& a : args) q.push_back(a.size() == 1 ? a[0] : a[k]);
      MERIDIAN_RETURN_IF_ERROR(Expand(at, name, params, q, 0));
    }
    return OkStatus();
  }

  Status Expand(const Token& at, const std::string& name, const std::vector<double>& params,
                const std::vector<int32_t>& q, int depth) {
    if (depth > kMaxQasmDepth) return At(at, fmt::format("gate definitions nest deeper than {}", kMaxQasmDepth));
    std::set<int32_t> distinct(q.begin(), q.end());
    if (distinct.size() != q.size()) return At(at, fmt::format("'{}' is given the same qubit twice", name));
    for (int32_t qubit : q) {
      if (measured_.count(qubit)) {
        return At(at, fmt::format("'{}' acts on a qubit already measured: measurement must come after every gate", name));
      }
    }
    if (auto b = Builtins().find(name); b != Builtins().end()) {
      MERIDIAN_RETURN_IF_ERROR(Arity(at, name, b->second.params, b->second.qubits, params, q));
      EmitBuiltin(name, params, q, c_.gates);
    } else if (auto d = defs_.find(name); d != defs_.end()) {
      const Definition& def = d->second;
      MERIDIAN_RETURN_IF_ERROR(Arity(at, name, static_cast<int>(def.params.size()), static_cast<int>(def.qargs.size()),
                                     params, q));
      std::map<std::string, double, std::less<>> env;
      for (size_t k = 0; k < params.size(); ++k) env[def.params[k]] = params[k];
      for (const Call& call : def.body) {
        std::vector<double> p;
        for (const std::vector<Token>& e : call.params) {
          MERIDIAN_ASSIGN_OR_RETURN(double v, Evaluate(e, env));
          p.push_back(v);
        }
        std::vector<int32_t> qs;
        for (const std::string& a : call.args) {
          qs.push_back(q[std::find(def.qargs.begin(), def.qargs.end(), a) - def.qargs.begin()]);
        }
        MERIDIAN_RETURN_IF_ERROR(Expand(call.at, call.name, p, qs, depth + 1));
      }
    } else {
      return At(at, fmt::format("unknown gate '{}'", name));
    }
    if (static_cast<int64_t>(c_.gates.size()) > kMaxQasmGates) {
      return At(at, fmt::format("the circuit has more than {} gates", kMaxQasmGates));
    }
    return OkStatus();
  }

  static Status Arity(const Token& at, const std::string& name, int want_params, int want_qubits,
                      const std::vector<double>& params, const std::vector<int32_t>& q) {
    if (static_cast<int>(params.size()) != want_params) {
      return At(at, fmt::format("'{}' takes {} parameter{}, not {}", name, want_params, want_params == 1 ? "" : "s",
                                params.size()));
    }
    if (static_cast<int>(q.size()) != want_qubits) {
      return At(at, fmt::format("'{}' acts on {} qubit{}, not {}", name, want_qubits, want_qubits == 1 ? "" : "s",
                                q.size()));
    }
    return OkStatus();
  }

  // ---- expressions: sum := product (('+'|'-') product)*, product := power (('*'|'/')
  // power)*, power := unary ('^' power)?, unary := '-' unary | atom.
  using Env = std::map<std::string, double, std::less<>>;
  struct Expr {
    const std::vector<Token>& t;
    const Env& env;
    size_t i = 0;
    int32_t depth = 0;  // of the parentheses, calls, signs and powers being read
  };
  // Each nesting is a few frames of this recursive reader: bounded, a parameter of
  // 16 MiB of '(' cannot run the agent's thread out of stack.
  static Status Deeper(Expr& e, const Token& at) {
    if (++e.depth > kMaxQasmExpressionDepth) {
      return At(at, fmt::format("a parameter nests deeper than {} (parentheses, signs and powers)",
                                kMaxQasmExpressionDepth));
    }
    return OkStatus();
  }

  static StatusOr<double> Evaluate(const std::vector<Token>& tokens, const Env& env) {
    Expr e{tokens, env};
    MERIDIAN_ASSIGN_OR_RETURN(double v, Sum(e));
    if (e.i != tokens.size()) return At(tokens[e.i], fmt::format("unexpected '{}' in a parameter", tokens[e.i].text));
    if (!std::isfinite(v)) return At(tokens.front(), "a parameter is not a finite number");
    return v;
  }
  static bool Sym(const Expr& e, std::string_view s) {
    return e.i < e.t.size() && e.t[e.i].kind == Token::kSymbol && e.t[e.i].text == s;
  }
  static StatusOr<double> Sum(Expr& e) {
    MERIDIAN_ASSIGN_OR_RETURN(double v, Product(e));
    while (Sym(e, "+") || Sym(e, "-")) {
      const bool plus = e.t[e.i++].text == "+";
      MERIDIAN_ASSIGN_OR_RETURN(double r, Product(e));
      v = plus ? v + r : v - r;
    }
    return v;
  }
  static StatusOr<double> Product(Expr& e) {
    MERIDIAN_ASSIGN_OR_RETURN(double v, Power(e));
    while (Sym(e, "*") || Sym(e, "/")) {
      const bool times = e.t[e.i++].text == "*";
      MERIDIAN_ASSIGN_OR_RETURN(double r, Power(e));
      v = times ? v * r : v / r;
    }
    return v;
  }
  static StatusOr<double> Power(Expr& e) {
    MERIDIAN_ASSIGN_OR_RETURN(double v, Unary(e));
    if (!Sym(e, "^")) return v;
    MERIDIAN_RETURN_IF_ERROR(Deeper(e, e.t[e.i++]));
    MERIDIAN_ASSIGN_OR_RETURN(double r, Power(e));
    --e.depth;
    return std::pow(v, r);
  }
  static StatusOr<double> Unary(Expr& e) {
    if (Sym(e, "-")) {
      MERIDIAN_RETURN_IF_ERROR(Deeper(e, e.t[e.i++]));
      MERIDIAN_ASSIGN_OR_RETURN(double v, Unary(e));
      --e.depth;
      return -v;
    }
    if (Sym(e, "+")) ++e.i;
    return Atom(e);
  }
  static StatusOr<double> Atom(Expr& e) {
    if (e.i >= e.t.size()) return At(e.t.back(), "a parameter ends too soon");
    const Token& t = e.t[e.i++];
    if (t.kind == Token::kNumber) {
      char* end = nullptr;
      const double v = std::strtod(t.text.c_str(), &end);
      if (end != t.text.c_str() + t.text.size()) return At(t, fmt::format("'{}' is not a number", t.text));
      return v;
    }
    if (t.kind == Token::kSymbol && t.text == "(") {
      MERIDIAN_RETURN_IF_ERROR(Deeper(e, t));
      MERIDIAN_ASSIGN_OR_RETURN(double v, Sum(e));
      if (!Sym(e, ")")) return At(t, "a '(' is not closed");
      ++e.i;
      --e.depth;
      return v;
    }
    if (t.kind != Token::kIdent) return At(t, fmt::format("unexpected '{}' in a parameter", t.text));
    if (t.text == "pi") return M_PI;
    if (auto v = e.env.find(t.text); v != e.env.end()) return v->second;
    static const std::map<std::string, double (*)(double), std::less<>> fns = {
        {"sin", [](double x) { return std::sin(x); }}, {"cos", [](double x) { return std::cos(x); }},
        {"tan", [](double x) { return std::tan(x); }}, {"exp", [](double x) { return std::exp(x); }},
        {"ln", [](double x) { return std::log(x); }},  {"sqrt", [](double x) { return std::sqrt(x); }}};
    auto fn = fns.find(t.text);
    if (fn == fns.end() || !Sym(e, "(")) return At(t, fmt::format("unknown parameter '{}'", t.text));
    ++e.i;
    MERIDIAN_RETURN_IF_ERROR(Deeper(e, t));
    MERIDIAN_ASSIGN_OR_RETURN(double x, Sum(e));
    if (!Sym(e, ")")) return At(t, fmt::format("'{}(' is not closed", t.text));
    ++e.i;
    --e.depth;
    return fn->second(x);
  }

  std::vector<Token> t_;
  size_t pos_ = 0;
  Circuit c_;
  std::vector<Register> qregs_, cregs_;
  std::map<std::string, Definition, std::less<>> defs_;
  std::set<int32_t> measured_;
};

// ---- fusion ----

QGate Compose(const QGate& later, const QGate& earlier) {
  auto at = [](const QGate& g, int r, int c) { return Cx{g.m[2 * (2 * r + c)], g.m[2 * (2 * r + c) + 1]}; };
  Cx out[2][2];
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 2; ++c) out[r][c] = Add(Mul(at(later, r, 0), at(earlier, 0, c)), Mul(at(later, r, 1), at(earlier, 1, c)));
  }
  return Make(out[0][0], out[0][1], out[1][0], out[1][1], earlier.target, 0);
}

}  // namespace

StatusOr<Circuit> ParseQasm(std::string_view text) {
  MERIDIAN_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(text));
  MERIDIAN_ASSIGN_OR_RETURN(Circuit c, Parser(std::move(tokens)).Run());
  if (c.qubits == 0) return InvalidArgumentError("the circuit declares no qreg");
  return c;
}

std::vector<QGate> FuseGates(std::span<const QGate> gates) {
  std::vector<QGate> out;
  std::map<uint32_t, QGate> pending;  // per qubit: the product of its uncontrolled gates since the last flush
  auto flush = [&](uint32_t q) {
    auto it = pending.find(q);
    if (it == pending.end()) return;
    out.push_back(it->second);
    pending.erase(it);
  };
  for (const QGate& g : gates) {
    if (g.controls == 0) {
      auto it = pending.find(g.target);
      if (it == pending.end()) {
        pending.emplace(g.target, g);
      } else {
        it->second = Compose(g, it->second);
      }
      continue;
    }
    flush(g.target);
    for (uint64_t c = g.controls; c != 0; c &= c - 1) flush(static_cast<uint32_t>(__builtin_ctzll(c)));
    out.push_back(g);
  }
  for (auto& [q, g] : pending) out.push_back(g);
  return out;
}

}  // namespace meridian::kernels
