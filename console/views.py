"""Pages and card actions. Thin: parse, authorize, call one service, render."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from recovery.selectors import task_page
from tasks.selectors import primary_membership


@login_required
def board(request):
    tasks, _ = task_page(request.user, limit=50)
    return render(request, "console/board.html", {"tasks": tasks, "membership": primary_membership(request.user)})
