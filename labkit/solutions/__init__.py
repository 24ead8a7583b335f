"""The reference implementations of the labs' exercises: the instructor's and the grader's.

``make release`` leaves this package out of the student kit (``labkit.grading.kit.release``), and
the grader's sandbox does not show it to a student's code. The rest of the kit reaches it only
through ``labkit.core.reference.solution``, which in the student kit asks for the student's own
function instead. One module per lab, named for it.
"""
