"""api.authentication: OIDC bearer tokens, JWKS caching, replay, webhook HMAC, bot key."""

import datetime as dt

import pytest
from django.core.cache import cache
from django.test import RequestFactory

from api import authentication
from api.authentication import (
    BotKeyError,
    SignatureMismatch,
    SignatureMissing,
    TokenError,
    bearer_token,
    callback_token,
    check_bot_key,
    verify_oidc_token,
    verify_webhook_signature,
)
from hud.ingestion.ingest import prune_used_tokens, spend_token
from hud.models import UsedToken

LEEWAY = 30
COOLDOWN = 60
MAX_AGE = 3600
LIFETIME = 300


def refusal(token: str) -> str:
    """Verify `token` expecting a TokenError; return its detail, checked free of token text."""
    with pytest.raises(TokenError) as caught:
        verify_oidc_token(token)
    detail = caught.value.detail
    assert detail == str(caught.value)
    assert token not in detail
    for segment in token.split("."):
        if len(segment) >= 8:
            assert segment not in detail
    return detail


# --- valid tokens -----------------------------------------------------------------------------


def test_valid_github_token_is_accepted_and_returns_its_claims(oidc):
    token = oidc.mint("pytorch/pytorch-backend")

    claims = verify_oidc_token(token)

    assert claims["repository"] == "pytorch/pytorch-backend"
    assert claims["iss"] == "https://token.actions.githubusercontent.com"
    assert claims["aud"] == "pytorch-cross-repo-ci-relay"
    assert oidc.requests == 1


def test_jwks_is_fetched_once_and_served_from_cache_afterwards(oidc):
    for _ in range(3):
        verify_oidc_token(oidc.mint())

    assert oidc.requests == 1


# --- algorithms -------------------------------------------------------------------------------


def test_alg_none_token_is_refused_before_any_key_is_fetched(oidc):
    detail = refusal(oidc.mint(alg="none"))

    assert "RS256" in detail
    assert oidc.requests == 0


def test_hs256_token_signed_with_the_public_key_pem_is_refused(oidc):
    detail = refusal(oidc.mint(alg="HS256", key=oidc.public_pem))

    assert "RS256" in detail
    assert oidc.requests == 0


@pytest.mark.parametrize("alg", ["RS512", "PS256"])
def test_other_asymmetric_algorithms_are_refused(oidc, alg):
    assert "RS256" in refusal(oidc.mint(alg=alg))
    assert oidc.requests == 0


def test_token_signed_by_an_unpublished_key_under_a_known_kid_is_refused(oidc):
    token = oidc.mint(key=oidc.unpublished.private_key)

    assert "signature" in refusal(token)


def test_token_with_a_tampered_payload_is_refused(oidc):
    header, _, signature = oidc.mint("org/repo").split(".")
    _, forged_payload, _ = oidc.mint("evil/repo").split(".")

    assert "signature" in refusal(f"{header}.{forged_payload}.{signature}")


def test_token_without_a_kid_is_refused(oidc):
    assert "kid" in refusal(oidc.mint(kid=None))


@pytest.mark.parametrize("garbage", ["not-a-jwt", "a.b.c", "...", "x" * 20000])
def test_malformed_tokens_are_refused_with_a_sentence(oidc, garbage):
    assert refusal(garbage)


# --- times ------------------------------------------------------------------------------------


def test_token_expired_beyond_the_leeway_is_refused(oidc, frozen_clock):
    token = oidc.mint()
    frozen_clock.advance(seconds=LIFETIME + LEEWAY + 1)

    assert "expired" in refusal(token)


def test_token_expired_within_the_leeway_is_accepted(oidc, frozen_clock):
    token = oidc.mint()
    frozen_clock.advance(seconds=LIFETIME + LEEWAY - 1)

    assert verify_oidc_token(token)["repository"] == "org/repo"


def test_token_issued_further_in_the_future_than_the_leeway_is_refused(oidc, frozen_clock):
    now = int(frozen_clock().timestamp())
    token = oidc.mint(iat=now + LEEWAY + 5, nbf=now, exp=now + LIFETIME)

    assert "future" in refusal(token)


def test_token_issued_slightly_in_the_future_within_the_leeway_is_accepted(oidc, frozen_clock):
    now = int(frozen_clock().timestamp())

    assert verify_oidc_token(oidc.mint(iat=now + LEEWAY - 5, nbf=now))


def test_token_not_valid_before_a_future_nbf_is_refused(oidc, frozen_clock):
    now = int(frozen_clock().timestamp())

    assert "not valid yet" in refusal(oidc.mint(nbf=now + LEEWAY + 5))


@pytest.mark.parametrize("exp", ["tomorrow", True, float("nan"), float("inf"), 10**20])
def test_time_claims_that_are_not_usable_numbers_are_refused(oidc, frozen_clock, exp):
    assert "exp" in refusal(oidc.mint(exp=exp))


# --- issuer, audience, claims -----------------------------------------------------------------


def test_token_for_another_audience_is_refused(oidc):
    assert "audience" in refusal(oidc.mint(aud="sigstore"))


def test_token_from_another_issuer_is_refused(oidc):
    assert "issuer" in refusal(oidc.mint(iss="https://evil.example.com"))


@pytest.mark.parametrize("claim", ["iss", "iat", "exp", "aud", "repository"])
def test_token_missing_a_required_claim_is_refused(oidc, claim):
    assert claim in refusal(oidc.mint(drop=(claim,)))


@pytest.mark.parametrize(
    "repository", ["no-slash", "a/b/c", " org/repo", "org/", "/repo", "org/re po", 42]
)
def test_token_whose_repository_claim_is_not_owner_slash_repo_is_refused(oidc, repository):
    assert "repository" in refusal(oidc.mint(repository=repository))


# --- JWKS refresh, cooldown and failures ------------------------------------------------------


def test_unknown_kid_on_a_cold_cache_costs_one_fetch_then_is_refused(oidc, frozen_clock):
    assert "does not publish" in refusal(oidc.mint(kid="made-up"))

    assert oidc.requests == 1


def test_unknown_kid_triggers_one_refresh_then_is_refused(oidc, frozen_clock):
    verify_oidc_token(oidc.mint())
    frozen_clock.advance(seconds=COOLDOWN + 1)

    assert "does not publish" in refusal(oidc.mint(kid="made-up"))
    assert oidc.requests == 2


def test_unknown_kids_refresh_at_most_once_per_cooldown(oidc, frozen_clock):
    verify_oidc_token(oidc.mint())
    frozen_clock.advance(seconds=COOLDOWN + 1)
    for attempt in range(5):
        refusal(oidc.mint(kid=f"made-up-{attempt}"))
        frozen_clock.advance(seconds=5)
    assert oidc.requests == 2

    frozen_clock.advance(seconds=COOLDOWN)
    refusal(oidc.mint(kid="made-up-again"))
    assert oidc.requests == 3


def test_unknown_kid_right_after_a_fetch_does_not_refetch(oidc, frozen_clock):
    verify_oidc_token(oidc.mint())

    refusal(oidc.mint(kid="made-up"))

    assert oidc.requests == 1


def test_rotated_key_is_picked_up_by_a_refresh_after_the_cooldown(oidc, frozen_clock):
    verify_oidc_token(oidc.mint())
    new_kid = oidc.rotate()
    frozen_clock.advance(seconds=COOLDOWN + 1)

    claims = verify_oidc_token(oidc.mint())

    assert claims["repository"] == "org/repo"
    assert oidc.kid == new_kid
    assert oidc.requests == 2


def test_cached_keys_still_verify_while_the_jwks_server_fails(oidc, frozen_clock):
    verify_oidc_token(oidc.mint())
    oidc.fail()
    frozen_clock.advance(seconds=COOLDOWN + 1)

    # An unknown kid makes the refresh happen; it fails and the old keys stay.
    refusal(oidc.mint(kid="made-up"))
    assert oidc.requests == 2
    assert verify_oidc_token(oidc.mint())["repository"] == "org/repo"


def test_stale_jwks_is_kept_when_the_refresh_fails_and_not_retried_within_cooldown(
    oidc, frozen_clock
):
    verify_oidc_token(oidc.mint())
    oidc.fail()
    frozen_clock.advance(seconds=MAX_AGE + 1)

    assert verify_oidc_token(oidc.mint())
    assert oidc.requests == 2
    frozen_clock.advance(seconds=COOLDOWN - 1)
    assert verify_oidc_token(oidc.mint())
    assert oidc.requests == 2


def test_last_good_jwks_is_used_when_the_current_copy_was_evicted(oidc, frozen_clock):
    verify_oidc_token(oidc.mint())
    current_key, _, _ = authentication._cache_keys()
    cache.delete(current_key)
    oidc.fail()
    frozen_clock.advance(seconds=COOLDOWN + 1)

    assert verify_oidc_token(oidc.mint())
    assert oidc.requests == 2


def test_jwks_older_than_max_age_is_refetched(oidc, frozen_clock):
    verify_oidc_token(oidc.mint())
    frozen_clock.advance(seconds=MAX_AGE + 1)

    verify_oidc_token(oidc.mint())

    assert oidc.requests == 2


def test_token_is_refused_when_the_jwks_cannot_be_fetched_at_all(oidc, frozen_clock, settings):
    oidc.fail()

    assert "could not be fetched" in refusal(oidc.mint())
    # The failure is cached briefly: tokens meanwhile are refused without waiting on a fetch.
    oidc.recover()
    for _ in range(6):
        assert "could not be fetched" in refusal(oidc.mint())
    assert oidc.requests == 1
    frozen_clock.advance(seconds=settings.CRCR_JWKS_FAILURE_COOLDOWN_SECONDS + 1)
    assert verify_oidc_token(oidc.mint())
    assert oidc.requests == 2


# --- bearer header ----------------------------------------------------------------------------


def test_bearer_token_is_extracted_from_the_authorization_header(oidc):
    request = RequestFactory().post("/github/callback", **oidc.headers())

    assert verify_oidc_token(bearer_token(request))["repository"] == "org/repo"


@pytest.mark.parametrize(
    "header", [None, "", "   ", "Basic dXNlcjpwYXNz", "Bearer", "Bearer a b", "Token abc"]
)
def test_missing_or_malformed_authorization_header_is_refused(header):
    extra = {} if header is None else {"HTTP_AUTHORIZATION": header}
    request = RequestFactory().post("/github/callback", **extra)

    with pytest.raises(TokenError) as caught:
        bearer_token(request)

    assert "Authorization" in caught.value.detail


# --- replay -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_token_id_is_spent_once_and_its_replay_is_refused(oidc):
    token = oidc.mint()
    claims = verify_oidc_token(token)
    assert spend_token(callback_token(claims)) is True

    assert spend_token(callback_token(verify_oidc_token(token))) is False

    assert UsedToken.objects.get(jti=claims["jti"]).expires_at == dt.datetime.fromtimestamp(
        claims["exp"], tz=dt.UTC
    )


@pytest.mark.django_db
def test_two_different_tokens_are_both_accepted(oidc):
    assert spend_token(callback_token(verify_oidc_token(oidc.mint())))
    assert spend_token(callback_token(verify_oidc_token(oidc.mint())))

    assert UsedToken.objects.count() == 2


def test_a_token_without_jti_is_refused(oidc):
    claims = verify_oidc_token(oidc.mint(drop=("jti",)))

    with pytest.raises(TokenError, match="jti"):
        callback_token(claims)


@pytest.mark.django_db
def test_prune_keeps_used_tokens_until_they_cannot_verify_any_more(oidc, frozen_clock):
    spend_token(callback_token(verify_oidc_token(oidc.mint())))
    expiry = frozen_clock() + dt.timedelta(seconds=LIFETIME)

    frozen_clock.set(expiry + dt.timedelta(seconds=LEEWAY - 1))
    assert prune_used_tokens() == 0
    frozen_clock.set(expiry + dt.timedelta(seconds=LEEWAY + 1))
    assert prune_used_tokens() == 1
    assert UsedToken.objects.count() == 0


# --- webhook signature ------------------------------------------------------------------------

GITHUB_SECRET = b"It's a Secret to Everybody"
GITHUB_BODY = b"Hello, World!"
GITHUB_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


def test_webhook_signature_matches_githubs_published_vector():
    verify_webhook_signature(GITHUB_SECRET, GITHUB_BODY, GITHUB_SIGNATURE)


def test_webhook_signature_for_another_body_is_a_mismatch():
    with pytest.raises(SignatureMismatch):
        verify_webhook_signature(GITHUB_SECRET, b"Hello, World?", GITHUB_SIGNATURE)


def test_webhook_signature_with_another_secret_is_a_mismatch():
    with pytest.raises(SignatureMismatch):
        verify_webhook_signature(b"another secret", GITHUB_BODY, GITHUB_SIGNATURE)


@pytest.mark.parametrize(
    "header",
    [
        GITHUB_SIGNATURE.removeprefix("sha256="),
        "sha1=757107ea0eb2509fc211221cce984b8a37570b6d",
        "sha256=",
        "sha256=zz\u00e9",
    ],
)
def test_malformed_webhook_signature_is_a_mismatch(header):
    with pytest.raises(SignatureMismatch):
        verify_webhook_signature(GITHUB_SECRET, GITHUB_BODY, header)


@pytest.mark.parametrize("header", [None, ""])
def test_missing_webhook_signature_is_reported_as_missing(header):
    with pytest.raises(SignatureMissing):
        verify_webhook_signature(GITHUB_SECRET, GITHUB_BODY, header)


def test_webhook_signature_with_an_empty_secret_is_never_accepted():
    import hashlib
    import hmac

    forged = "sha256=" + hmac.new(b"", GITHUB_BODY, hashlib.sha256).hexdigest()

    with pytest.raises(SignatureMismatch):
        verify_webhook_signature(b"", GITHUB_BODY, forged)


# --- relay bot key ----------------------------------------------------------------------------


def _forward(key: str | None):
    extra = {} if key is None else {"HTTP_X_HUD_INTERNAL_BOT": key}
    return RequestFactory().post("/api/crcr/results", **extra)


def test_right_bot_key_is_accepted(settings):
    settings.HUD_BOT_KEY = "relay-shared-key"

    check_bot_key(_forward("relay-shared-key"))


def test_wrong_bot_key_is_refused(settings):
    settings.HUD_BOT_KEY = "relay-shared-key"

    with pytest.raises(BotKeyError) as caught:
        check_bot_key(_forward("relay-shared-kez"))

    assert caught.value.reason == "wrong"
    assert "relay-shared-ke" not in caught.value.detail


@pytest.mark.parametrize("key", [None, ""])
def test_missing_bot_key_is_refused(settings, key):
    settings.HUD_BOT_KEY = "relay-shared-key"

    with pytest.raises(BotKeyError) as caught:
        check_bot_key(_forward(key))

    assert caught.value.reason == "missing"


@pytest.mark.parametrize("configured", [None, ""])
def test_forward_endpoint_is_disabled_when_bot_key_is_unset(settings, configured):
    settings.HUD_BOT_KEY = configured

    with pytest.raises(BotKeyError) as caught:
        check_bot_key(_forward(""))

    assert caught.value.reason == "disabled"
    with pytest.raises(BotKeyError):
        check_bot_key(_forward("anything"))
