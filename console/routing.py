from django.urls import path

from console.live.consumers import BoardConsumer, BulkConsumer, InboxConsumer, RunConsumer, TaskConsumer
from console.live.ops import WorkersConsumer

websocket_urlpatterns = [
    path("ws/board/", BoardConsumer.as_asgi()),
    path("ws/tasks/<int:obj_id>/", TaskConsumer.as_asgi()),
    path("ws/runs/<int:obj_id>/", RunConsumer.as_asgi()),
    path("ws/workers/", WorkersConsumer.as_asgi()),
    path("ws/inbox/", InboxConsumer.as_asgi()),
    path("ws/bulk/<int:obj_id>/", BulkConsumer.as_asgi()),
]
