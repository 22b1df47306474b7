"""The dashboard's views: server-rendered pages (login required) and the fragments and
figure data that the page's script fetches when an event says they changed."""
