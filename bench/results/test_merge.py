#!/usr/bin/env python3
"""Checks of merge.py (run by scripts/test.sh): the faster round wins, a wrong output is never
hidden by a good round, and cases or implementations seen in one round only are kept."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import merge  # noqa: E402


def report(impl, copy_gbs, cases):
    return {"implementation": impl, "copy_gbs": copy_gbs, "cases": cases}


class MergeRounds(unittest.TestCase):
    def setUp(self):
        self.round1 = [report("torch-eager", 3000.0, [
            {"id": "a", "status": "ok", "median_ms": 2.0, "copy_ms": 1.0},
            {"id": "b", "status": "wrong", "median_ms": None},
            {"id": "c", "status": "failed", "median_ms": None},
        ])]
        self.round2 = [
            report("torch-eager", 3010.0, [
                {"id": "a", "status": "ok", "median_ms": 1.5, "copy_ms": 1.2},
                {"id": "b", "status": "ok", "median_ms": 1.0},
                {"id": "c", "status": "ok", "median_ms": 3.0},
                {"id": "d", "status": "ok", "median_ms": 4.0},
            ]),
            report("torch-compile", 3005.0, [{"id": "a", "status": "ok", "median_ms": 1.7}]),
        ]
        self.merged = merge.merge([self.round1, self.round2])
        self.cases = {c["id"]: c for c in self.merged[0]["cases"]}

    def test_the_faster_round_and_the_faster_copy_stand(self):
        a = self.cases["a"]
        self.assertEqual((a["median_ms"], a["copy_ms"], a["rounds"]), (1.5, 1.0, 2))
        self.assertEqual(self.merged[0]["copy_gbs"], 3010.0)

    def test_a_wrong_output_is_never_hidden(self):
        self.assertEqual(self.cases["b"]["status"], "wrong")

    def test_a_failed_round_gives_way_to_a_timed_one(self):
        self.assertEqual((self.cases["c"]["status"], self.cases["c"]["median_ms"]), ("ok", 3.0))

    def test_cases_and_implementations_of_one_round_are_kept_in_order(self):
        self.assertEqual([c["id"] for c in self.merged[0]["cases"]], ["a", "b", "c", "d"])
        self.assertEqual(self.cases["d"]["rounds"], 1)
        self.assertEqual([r["implementation"] for r in self.merged], ["torch-eager", "torch-compile"])


if __name__ == "__main__":
    unittest.main()
