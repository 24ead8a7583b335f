"""The order ``make test`` runs the suite in (``conftest.py`` applies it; ``kit/test_suite_groups.py``
tests it): a module of its own, since a test cannot import ``conftest`` by name where several areas
have one."""


def longest_first(groups: list[str], fast: list[bool], seconds: list[float]) -> list[int]:
    """The items' indices in running order: fast groups before heavy ones, each kind longest group
    first (``seconds``: each item's), groups in first-appearance order where they tie, a group's
    items in file order."""
    first, total = {}, {}
    for i, g in enumerate(groups):
        first.setdefault(g, i)
        total[g] = total.get(g, 0.0) + seconds[i]
    return sorted(range(len(groups)), key=lambda i: (not fast[i], -total[groups[i]], first[groups[i]], i))
