"""Pagination for list endpoints: page numbers with a client-chosen size up to a cap."""

from rest_framework.pagination import PageNumberPagination


class Pagination(PageNumberPagination):
    """?page=N&page_size=M (M ≤ 1000); CSV exports use a larger cap of their own."""

    page_size_query_param = "page_size"
    max_page_size = 1000
