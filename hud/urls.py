"""Server-rendered pages."""

urlpatterns: list = []
