"""The GBNF recognizer (gbnf.py) that judges grammar-constrained output, on hand-picked strings
for every shared grammar: it must accept sentences, refuse non-sentences, and tell a viable
prefix (an output cut by max_tokens) from a dead one. No server."""
import os

import pytest

from client_util import SHARED
from gbnf import Grammar, GrammarError

GRAMMAR_DIR = os.path.join(SHARED, "grammars")

CASES = {  # grammar: (sentences, non-sentences that are viable prefixes, dead strings)
    "json": (['{}', '{"a": 1}', '{"a":[1,2,{"b":null}], "c": "x\\n"}', '{"a": 1.5e3}', '{ }'],
             ['{', '{"a": 1', '{"a"', '', '{"a": tr'],
             ['[1]', '{"a":}', 'x', '{"a": 01}', '{"a": 1}}']),
    "json_arr": (['[\n1,\n"a"]', '[\n]'], ['[\n1,'], ['[1]', '{}']),
    "arithmetic": (['1+2= 3\n', 'x*(y-1)= z\n'], ['1+2', '1+2='], ['(a + b)= c\n', '=1\n']),
    "chess": (['1. e4 e5\n2. Nf3 Nc6\n'], ['1. e4 e5\n', '1. e4 e5\n2. N'], ['1. e9 e5\n', '2. e4 e5\n']),
    "list": (['- a\n- bb\n'], ['- a', '- a\n-'], ['- \n', 'a\n']),
    "english": (['Hello, world! 1', 'a\tb'], ['Hello '], ['Hello  x', 'é', ' a']),
    "japanese": (['こんにちは 世界'], ['こんにちは '], ['abc']),
    "c": (['', 'int main(){return 0;}', 'int f(int x){x = x+1;if(x<2){return x;}else{return 1;}}'],
          ['int ma', 'int main(){'], ['int main() {}', 'main(){}']),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_recognizer_on_known_strings(name):
    path = os.path.join(GRAMMAR_DIR, name + ".gbnf")
    if not os.path.exists(path):
        pytest.skip(f"{path} not present")
    g = Grammar(open(path, encoding="utf-8").read())
    sentences, prefixes, dead = CASES[name]
    for s in sentences:
        assert g.matches(s) and g.is_prefix(s), s
    for s in prefixes:
        assert not g.matches(s) and g.is_prefix(s), s
    for s in dead:
        assert not g.matches(s) and not g.is_prefix(s), s


def test_syntax_repetition_escapes_and_classes():
    g = Grammar(r'root ::= "a"{2,3} [\x41-\x43]+ [^\n] ("\"" | "\u00e9")? . "#" # comment')
    assert g.matches('aaAB!"x#') and g.matches("aaCBé#é#") is False and g.matches("aaC!é?#")
    assert not g.matches("aaaaA!x#")


@pytest.mark.parametrize("bad", ['root ::= "a', 'root ::= undefined', 'x ::= "a"', 'root ::= ( "a"', 'root ::= [a'])
def test_malformed_grammars_are_refused(bad):
    with pytest.raises(GrammarError):
        Grammar(bad)
