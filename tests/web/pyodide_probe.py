"""Run a probe the way window.engine.run does: the value of the last expression."""
import ast


def evaluate_natively(source: str):
    tree = ast.parse(source)
    *body, last = tree.body
    namespace: dict = {}
    exec(compile(ast.Module(body=body, type_ignores=[]), "<probe>", "exec"), namespace)
    return eval(compile(ast.Expression(last.value), "<probe>", "eval"), namespace)
