"""SQL lint for the schema, the migrations and the pgTAP tests (run by `make lint`).

Every file must parse, function bodies included (rule `parse`). Schema files (under `sql/` and
`migrations/deploy/`) must also follow the project's conventions:

* `errcode`: every RAISE EXCEPTION in PL/pgSQL carries an SQLSTATE (docs/architecture.md §13, error contract);
* `definer-search-path`: every SECURITY DEFINER function pins its search_path;
* `clock`: business time only comes from compute.compute_now() (P9, one clock).

The declarative schema (`sql/`) also names every constraint it declares (rule `constraint-name`:
`CONSTRAINT reservations_provisional_has_expiry CHECK …`), so that no migration depends on a name
PostgreSQL generated, and never compares a booking's state with 'active' or 'provisional' (rule
`booking-state`): a booking is written once as a live hold ('held'); whether it is provisional or
active is its reservation's state, read through compute.active_bookings (sql/200_reservations.sql).
A reader that filtered on the booking row would expose a provisional hold before the IAM decision.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

import pglast
from pglast.parser import ParseError, parse_sql_json, scan

DEFAULT_PATHS = ("sql", "migrations", "pgtap")
SCHEMA_DIRS = frozenset({"sql", "deploy"})
PARSE_ONLY_DIRS = frozenset({"pgtap", "revert", "verify"})

CLOCK_FUNCTIONS = frozenset(
    {"now", "clock_timestamp", "statement_timestamp", "transaction_timestamp", "timeofday"}
)
CLOCK_VALUE_FUNCTIONS = frozenset(
    {"CURRENT_DATE", "CURRENT_TIME", "CURRENT_TIMESTAMP", "LOCALTIME", "LOCALTIMESTAMP"}
)
CLOCK_LITERALS = frozenset({"now", "today", "tomorrow", "yesterday"})
DATETIME_TYPES = frozenset({"timestamptz", "timestamp", "date", "time", "timetz"})
CLOCK_FUNCTION_NAME = ["compute", "compute_now"]

ELOG_ERROR = 21  # elog level of RAISE EXCEPTION (PostgreSQL's ERROR)
RAISE_OPTION_ERRCODE = 0  # PLPGSQL_RAISEOPTION_ERRCODE
PARSE_MODE_DEFAULT = 0  # PLpgSQL_expr.parseMode: a whole SQL statement
PARSE_MODE_EXPRESSION = 2  # an expression, parsed by PostgreSQL as SELECT <expr>
# Other modes (3-5) are assignments: `target := expr`.

COMMENT_TOKENS = frozenset({"SQL_COMMENT", "C_COMMENT"})
NAMED_CONSTRAINT_TYPES = frozenset({"CONSTR_CHECK", "CONSTR_PRIMARY", "CONSTR_UNIQUE", "CONSTR_EXCLUSION", "CONSTR_FOREIGN"})
DECLARATIVE_DIR = "sql"
RESERVATION_STATES = frozenset({"active", "provisional"})  # a reservation's, never a booking's (rule booking-state)


@dataclass(frozen=True)
class Finding:
    """One lint finding, printed as `path:line: [rule] message`."""

    path: str
    line: int
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: [{self.rule}] {self.message}"


class Node(NamedTuple):
    """A tagged node of pglast's JSON tree, with the nearest PL/pgSQL line number above it."""

    kind: str
    fields: dict[str, Any]
    lineno: int


@dataclass(frozen=True)
class Source:
    """SQL text that starts at `first_line` of the linted file."""

    text: str
    first_line: int = 1

    @cached_property
    def data(self) -> bytes:
        """The UTF-8 text: pglast's JSON locations are byte offsets into it."""
        return self.text.encode()

    def line_at_char(self, offset: int) -> int:
        return self.first_line + self.text.count("\n", 0, offset)

    def line_at_byte(self, offset: int) -> int:
        return self.first_line + self.data.count(b"\n", 0, offset)


@dataclass(frozen=True)
class Body:
    """The source of a function or DO block body."""

    language: str
    source: Source


def walk(tree: Any, lineno: int = 1) -> Iterator[Node]:
    """Yield every tagged node (`{"Kind": {...}}`) of a pglast JSON tree, depth first."""
    if isinstance(tree, list):
        for item in tree:
            yield from walk(item, lineno)
    elif isinstance(tree, dict):
        lineno = tree.get("lineno", lineno)
        for key, value in tree.items():
            if key[:1].isupper() and isinstance(value, dict):
                yield Node(key, value, value.get("lineno", lineno))
            yield from walk(value, lineno)


def parse(sql: str) -> list[dict[str, Any]]:
    """Parse SQL into pglast's JSON statements (`stmt`, `stmt_location`, `stmt_len`)."""
    return json.loads(parse_sql_json(sql))["stmts"]


def only_node(tagged: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Split `{"Kind": fields}` into its kind and fields."""
    [(kind, fields)] = tagged.items()
    return kind, fields


def strings(items: list[dict[str, Any]]) -> list[str]:
    """The values of a list of String nodes (a qualified name)."""
    return [item["String"]["sval"] for item in items]


PSQL_VARIABLE = re.compile(r"(?<![:\w]):(['\"]?)([A-Za-z_]\w*)\1")
TRAILING_GSET = re.compile(r"\\gset\b.*$")


def strip_meta_commands(sql: str) -> str:
    """Make a psql script plain SQL, keeping line numbers: meta-command lines (`\\set`, `\\i`) are
    blanked, and a trailing `\\gset` ends its statement like `;`."""
    return "\n".join("" if line.lstrip().startswith("\\") else TRAILING_GSET.sub(";", line) for line in sql.split("\n"))


def replace_psql_variables(sql: str) -> str:
    """psql variables (`:name`, `:'name'`, `:"name"`) as a literal or identifier of their name. Only
    for psql scripts (tests, verify and revert scripts): the pattern would also match text such as
    `{"a":false}` inside a string, which a schema file may hold."""
    return PSQL_VARIABLE.sub(lambda m: (m[1] or "'") + m[2] + (m[1] or "'"), sql)


def has_schema_rules(path: pathlib.Path) -> bool:
    """Whether the nearest telling directory of `path` is a schema one (`sql/`, `deploy/`)."""
    for part in reversed(path.resolve().parent.parts):
        if part in SCHEMA_DIRS:
            return True
        if part in PARSE_ONLY_DIRS:
            return False
    return False


def is_declarative(path: pathlib.Path) -> bool:
    """Whether `path` is in the declarative schema (`sql/`), whose constraints carry names."""
    return path.resolve().parent.name == DECLARATIVE_DIR


def unnamed_constraints(kind: str, fields: dict[str, Any]) -> Iterator[str]:
    """The types of the constraints a CREATE TABLE or ALTER TABLE declares without a name."""
    constraints: list[dict[str, Any]] = []
    if kind == "CreateStmt":
        for element in fields.get("tableElts", []):
            element_kind, element_fields = only_node(element)
            if element_kind == "ColumnDef":
                constraints += [only_node(c)[1] for c in element_fields.get("constraints", [])]
            elif element_kind == "Constraint":
                constraints.append(element_fields)
    elif kind == "AlterTableStmt":
        for command in fields.get("cmds", []):
            definition = only_node(command)[1].get("def")
            if definition and only_node(definition)[0] == "Constraint":
                constraints.append(only_node(definition)[1])
    for constraint in constraints:
        if constraint["contype"] in NAMED_CONSTRAINT_TYPES and not constraint.get("conname"):
            yield constraint["contype"].removeprefix("CONSTR_")


def def_elems(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Index a list of DefElem nodes by name."""
    elems = (fields for kind, fields in map(only_node, items) if kind == "DefElem")
    return {fields["defname"]: fields for fields in elems}


def sets_search_path(options: list[dict[str, Any]]) -> bool:
    """Whether function options hold `SET search_path ...` (not RESET)."""
    for kind, fields in map(only_node, options):
        if kind == "DefElem" and fields["defname"] == "set":
            setting = fields["arg"]["VariableSetStmt"]
            if setting.get("name") == "search_path" and setting["kind"] != "VAR_RESET":
                return True
    return False


def is_security_definer(options: list[dict[str, Any]]) -> bool:
    """Whether function options hold SECURITY DEFINER."""
    security = def_elems(options).get("security")
    return security is not None and security["arg"]["Boolean"].get("boolval", False)


def clock_read(node: Node) -> tuple[str, int] | None:
    """The clock read a SQL node makes, as (what, byte location), or None."""
    fields = node.fields
    if node.kind == "FuncCall":
        *schema, name = strings(fields["funcname"])
        if name in CLOCK_FUNCTIONS and schema in ([], ["pg_catalog"]):
            return f"{name}()", fields.get("location", -1)
    elif node.kind == "SQLValueFunction":
        name = fields["op"].removeprefix("SVFOP_").removesuffix("_N")
        if name in CLOCK_VALUE_FUNCTIONS:
            return name, fields.get("location", -1)
    elif node.kind == "TypeCast":
        constant = fields["arg"].get("A_Const", {})
        literal = constant.get("sval", {}).get("sval", "").strip().lower()
        type_name = strings(fields["typeName"]["names"])[-1]
        if literal in CLOCK_LITERALS and type_name in DATETIME_TYPES:
            return f"'{literal}'::{type_name}", constant.get("location", -1)
    return None


def relation_names(fields: dict[str, Any]) -> list[tuple[str, str]]:
    """(relation, name it goes by) of every table a statement reads or writes."""
    found = []
    for node in walk(fields):
        relation = node.fields.get("relation") if node.kind in ("UpdateStmt", "DeleteStmt", "InsertStmt") else None
        for var in ([node.fields] if node.kind == "RangeVar" else []) + ([relation] if relation else []):
            if var.get("schemaname") in (None, "compute"):
                found.append((var["relname"], var.get("alias", {}).get("aliasname", var["relname"])))
    return found


def reservation_state_constants(value: dict[str, Any]) -> bool:
    """Whether an expression is 'active' or 'provisional', or a list holding one."""
    kind, fields = only_node(value)
    items = fields["items"] if kind == "List" else [{kind: fields}]
    return any(
        only_node(item)[0] == "A_Const" and only_node(item)[1].get("sval", {}).get("sval") in RESERVATION_STATES
        for item in items
    )


def booking_state_compared(fields: dict[str, Any]) -> Iterator[int]:
    """Byte locations where a statement compares (or sets) a booking's state with 'active' or
    'provisional': `b.state` of an alias of compute.bookings, or a bare `state` where bookings is
    the only table."""
    relations = relation_names(fields)
    bookings = {name for relation, name in relations if relation == "bookings"}
    if not bookings:
        return
    only_bookings = all(relation == "bookings" for relation, _ in relations)
    for node in walk(fields):
        if node.kind == "A_Expr" and "lexpr" in node.fields and "rexpr" in node.fields:
            kind, column = only_node(node.fields["lexpr"])
            names = strings(column["fields"]) if kind == "ColumnRef" and all("String" in f for f in column["fields"]) else []
            is_booking_state = names[-1:] == ["state"] and (
                (len(names) == 2 and names[0] in bookings) or (len(names) == 1 and only_bookings)
            )
            if is_booking_state and reservation_state_constants(node.fields["rexpr"]):
                yield node.fields.get("location", -1)
        elif node.kind == "UpdateStmt" and node.fields["relation"]["relname"] == "bookings":
            for target in node.fields.get("targetList", []):
                res = target["ResTarget"]
                if res.get("name") == "state" and reservation_state_constants(res["val"]):
                    yield res.get("location", -1)


def expression_sql(expr: dict[str, Any]) -> str:
    """A PL/pgSQL expression as a SQL statement that parse_sql accepts."""
    query = expr["query"]
    mode = expr.get("parseMode", PARSE_MODE_DEFAULT)
    if mode == PARSE_MODE_DEFAULT:
        return query
    if mode == PARSE_MODE_EXPRESSION:
        return f"SELECT {query}"
    return f"SELECT {assigned_value(query)}"


def assigned_value(assignment: str) -> str:
    """The right-hand side of a PL/pgSQL assignment `target[sub].field := value`."""
    depth = 0
    for token in scan(assignment):
        if token.name in ("ASCII_40", "ASCII_91"):  # ( [
            depth += 1
        elif token.name in ("ASCII_41", "ASCII_93"):  # ) ]
            depth -= 1
        elif depth == 0 and token.name in ("COLON_EQUALS", "ASCII_61"):  # := =
            return assignment[token.end + 1 :]
    raise ParseError(f"not an assignment: {assignment}", None)


def raise_has_errcode(fields: dict[str, Any]) -> bool:
    """Whether a RAISE names its SQLSTATE (condition name, SQLSTATE '...', USING ERRCODE)."""
    options = [option["PLpgSQL_raise_option"] for option in fields.get("options", [])]
    return "condname" in fields or any(
        option.get("opt_type", RAISE_OPTION_ERRCODE) == RAISE_OPTION_ERRCODE for option in options
    )


def is_reraise(fields: dict[str, Any]) -> bool:
    """Whether a RAISE is the bare `RAISE;` of an exception handler."""
    return not {"condname", "message", "options"} & fields.keys()


_DECLARED_SCHEMA_TYPE = re.compile(
    r"^(\s*\w+\s+(?:CONSTANT\s+)?)(?!pg_catalog\.|public\.)\w+\.\w+(?:%ROWTYPE)?(\[\])?(?=\s*(?:;|:=|=|DEFAULT|NOT\s+NULL))",
    re.IGNORECASE | re.MULTILINE,
)


_HEADER_SCHEMA_TYPE = re.compile(r"(?<![\w.])(?!pg_catalog\.|public\.)\w+\.\w+(\[\])?(?![\w.]|\s*\()")
_BODY_START = re.compile(r"\$\w*\$")


def declared_types_as_text(function: str) -> str:
    """Parameters, results and declarations typed by a schema other than pg_catalog/public (e.g.
    `v_pool compute.pools;`), whose lookup libpg_query's PL/pgSQL parser does not implement, retyped
    as text; line numbers are kept. Types do not matter to the rules."""
    start = _BODY_START.search(function)
    split = start.start() if start else len(function)
    header = _HEADER_SCHEMA_TYPE.sub("text", function[:split])
    return header + _DECLARED_SCHEMA_TYPE.sub(lambda match: f"{match[1]}text", function[split:])


def do_block_as_function(body: str) -> str:
    """Wrap a DO block body in a CREATE FUNCTION, which parse_plpgsql needs."""
    tag = "$do$"
    while tag in body:
        tag = tag[:-1] + "_$"
    return f"CREATE FUNCTION pg_temp.do_block() RETURNS void LANGUAGE plpgsql AS {tag}{body}{tag}"


class FileLinter:
    """Lints the text of one file; findings accumulate in `findings`."""

    def __init__(self, sql: str, path: str, *, schema_rules: bool, naming_rules: bool = False) -> None:
        plain = strip_meta_commands(sql)
        self.source = Source(plain if schema_rules else replace_psql_variables(plain))
        self.path = path
        self.schema_rules = schema_rules
        self.naming_rules = naming_rules
        self.findings: list[Finding] = []

    def report(self, line: int, rule: str, message: str) -> None:
        self.findings.append(Finding(self.path, line, rule, message))

    def lint(self) -> list[Finding]:
        try:
            statements = parse(self.source.text)
        except ParseError as error:
            self.report(self.error_line(self.source, error, 1), "parse", error.args[0])
            return self.findings
        for statement in statements:
            self.lint_statement(statement)
        return sorted(dict.fromkeys(self.findings), key=lambda finding: finding.line)

    @staticmethod
    def error_line(source: Source, error: ParseError, fallback: int) -> int:
        """The line of a parse error (pglast gives a character offset, when it has one)."""
        location = error.args[1] if len(error.args) > 1 else None
        return fallback if location is None else source.line_at_char(location)

    def statement_line(self, raw: dict[str, Any]) -> int:
        """The line of a statement's first token (after whitespace and comments)."""
        text = self.statement_text(raw)
        first_token = next(token for token in scan(text) if token.name not in COMMENT_TOKENS)
        return self.source.line_at_byte(raw.get("stmt_location", 0)) + text.count(
            "\n", 0, first_token.start
        )

    def statement_text(self, raw: dict[str, Any]) -> str:
        start = raw.get("stmt_location", 0)
        end = start + raw["stmt_len"] if raw.get("stmt_len") else len(self.source.data)
        return self.source.data[start:end].decode()

    def lint_statement(self, raw: dict[str, Any]) -> None:
        kind, fields = only_node(raw["stmt"])
        line = self.statement_line(raw)
        is_clock_function = (
            kind == "CreateFunctionStmt" and strings(fields["funcname"]) == CLOCK_FUNCTION_NAME
        )
        check_clock = self.schema_rules and not is_clock_function
        if check_clock:
            self.check_clock(walk(fields), self.source, line)
        if self.naming_rules:
            self.check_booking_state(fields, self.source, line)
        if kind == "CreateFunctionStmt":
            self.lint_function(raw, fields, line, check_clock=check_clock)
        elif kind == "DoStmt":
            self.lint_do_block(fields, line)
        elif kind == "AlterFunctionStmt" and self.schema_rules:
            self.check_definer_search_path(fields["actions"], line)
        if self.naming_rules:
            for constraint in unnamed_constraints(kind, fields):
                self.report(line, "constraint-name", f"a {constraint} constraint without a name: write CONSTRAINT <name> before it")

    def body(self, options: list[dict[str, Any]], default_language: str) -> Body | None:
        """The body of a function or DO block, unless it is an object file (LANGUAGE c)."""
        elems = def_elems(options)
        body = elems.get("as")
        if body is None:
            return None
        kind, value = only_node(body["arg"])
        items = value["items"] if kind == "List" else [{kind: value}]
        if len(items) != 1:
            return None
        language = elems.get("language")
        return Body(
            language=strings([language["arg"]])[0].lower() if language else default_language,
            source=Source(strings(items)[0], self.source.line_at_byte(body["arg_location"])),
        )

    def lint_function(
        self, raw: dict[str, Any], fields: dict[str, Any], line: int, *, check_clock: bool
    ) -> None:
        options = fields.get("options", [])
        if self.schema_rules:
            self.check_definer_search_path(options, line)
        body = self.body(options, default_language="sql")
        if body is None:
            return
        if body.language == "plpgsql":
            self.lint_plpgsql(self.statement_text(raw), body.source, line, check_clock=check_clock)
        elif body.language == "sql":
            self.lint_sql_body(body.source, line, check_clock=check_clock)

    def lint_do_block(self, fields: dict[str, Any], line: int) -> None:
        body = self.body(fields["args"], default_language="plpgsql")
        if body is not None and body.language == "plpgsql":
            function = do_block_as_function(body.source.text)
            self.lint_plpgsql(function, body.source, line, check_clock=self.schema_rules)

    def lint_sql_body(self, body: Source, line: int, *, check_clock: bool) -> None:
        try:
            statements = parse(body.text)
        except ParseError as error:
            self.report(self.error_line(body, error, line), "parse", f"SQL body: {error.args[0]}")
            return
        if check_clock:
            self.check_clock(walk(statements), body, line)
        if self.naming_rules:
            for statement in statements:
                self.check_booking_state(statement["stmt"], body, line)

    def lint_plpgsql(self, function: str, body: Source, line: int, *, check_clock: bool) -> None:
        """Lint a PL/pgSQL body, given as a CREATE FUNCTION statement."""
        try:
            [tree] = pglast.parse_plpgsql(declared_types_as_text(function))
        except ParseError as error:
            self.report(line, "parse", f"PL/pgSQL body: {error.args[0]}")
            return
        if not self.schema_rules:
            return
        for node in walk(tree):
            body_line = body.first_line + node.lineno - 1
            if node.kind == "PLpgSQL_stmt_raise":
                self.check_raise(node.fields, body_line)
            elif node.kind == "PLpgSQL_expr":
                self.check_expression(node.fields, body_line, check_clock=check_clock)

    def check_raise(self, fields: dict[str, Any], line: int) -> None:
        if fields.get("elog_level", 0) < ELOG_ERROR or is_reraise(fields):
            return
        if not raise_has_errcode(fields):
            self.report(
                line,
                "errcode",
                "RAISE EXCEPTION without an SQLSTATE: add USING ERRCODE = '...' "
                "(or use compute.raise_error)",
            )

    def check_expression(self, expr: dict[str, Any], line: int, *, check_clock: bool) -> None:
        if not (check_clock or self.naming_rules):
            return
        sql = expression_sql(expr)
        try:
            statements = parse(sql)
        except ParseError as error:
            self.report(line, "parse", f"PL/pgSQL expression {expr['query']!r}: {error.args[0]}")
            return
        if check_clock:
            self.check_clock(walk(statements), Source(sql, line), line)
        if self.naming_rules:
            for statement in statements:
                self.check_booking_state(statement["stmt"], Source(sql, line), line)

    def check_booking_state(self, statement: dict[str, Any], source: Source, fallback_line: int) -> None:
        for location in booking_state_compared(statement):
            self.report(
                source.line_at_byte(location) if location >= 0 else fallback_line,
                "booking-state",
                "a booking's state is never 'active' or 'provisional' (bookings are written once as 'held'): "
                "read active holds through compute.active_bookings, or a booking's shown state with compute.booking_state",
            )

    def check_clock(self, nodes: Iterator[Node], source: Source, fallback_line: int) -> None:
        for node in nodes:
            read = clock_read(node)
            if read is None:
                continue
            what, location = read
            line = source.line_at_byte(location) if location >= 0 else fallback_line
            self.report(
                line,
                "clock",
                f"{what} reads the clock: business time comes from compute.compute_now()",
            )

    def check_definer_search_path(self, options: list[dict[str, Any]], line: int) -> None:
        if is_security_definer(options) and not sets_search_path(options):
            self.report(
                line,
                "definer-search-path",
                "SECURITY DEFINER without SET search_path: pin it (e.g. SET search_path = '')",
            )


def lint_text(sql: str, path: str, *, schema_rules: bool, naming_rules: bool = False) -> list[Finding]:
    """Lint the SQL text of one file; `schema_rules` adds errcode, definer-search-path, clock;
    `naming_rules` constraint-name."""
    return FileLinter(sql, path, schema_rules=schema_rules, naming_rules=naming_rules).lint()


def sql_files(paths: list[pathlib.Path]) -> list[pathlib.Path]:
    """The files named, and the `*.sql` files under the directories named (sorted)."""
    files: list[pathlib.Path] = []
    for path in paths:
        if path.is_dir():
            files += sorted(file for file in path.rglob("*.sql") if file.is_file())
        else:
            files.append(path)
    return files


def lint_paths(paths: list[pathlib.Path]) -> list[Finding]:
    """Lint the SQL files at or under `paths`, schema rules for `sql/` and `migrations/deploy/`."""
    findings: list[Finding] = []
    for file in sql_files(paths):
        sql = file.read_text(encoding="utf-8")
        findings += lint_text(sql, str(file), schema_rules=has_schema_rules(file), naming_rules=is_declarative(file))
    return findings


def main(argv: list[str] | None = None) -> int:
    """Print the findings and a summary; exit status 1 when there are findings."""
    parser = argparse.ArgumentParser(
        prog="python -m better_compute.lint", description=__doc__.splitlines()[0]
    )
    parser.add_argument("paths", nargs="*", default=list(DEFAULT_PATHS), metavar="PATH")
    paths = [pathlib.Path(path) for path in parser.parse_args(argv).paths]
    missing = [str(path) for path in paths if not path.exists()]
    if missing:
        parser.error(f"no such file or directory: {', '.join(missing)}")
    findings = lint_paths(paths)
    for finding in findings:
        print(finding)
    print(f"lint: {len(sql_files(paths))} files, {len(findings)} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    raise SystemExit(main())
